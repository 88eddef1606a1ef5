"""`subsessions batch` hardened (issue 35), as a real process against the real openai SDK over
loopback: formulas in a CSV output, a FIFO or a device as input, a tampered journal, an
existing `--out`, and the printed resume command run exactly as printed."""

from __future__ import annotations

import asyncio
import csv
import io
import os
import shlex
import signal
import sys
from pathlib import Path

import orjson
from fake_openai import FakeOpenAI, Recorded, Reply, fake_openai, text
from test_batch_attacks import FORMULAS, HYPERLINK, device_node
from test_batch_cli import command, echo, prompt, real, records, run, write_csv

__all__ = ["fake_openai"]  # the fixture, imported so that pytest finds it here

KEY = "sk-batch-test-key-0123456789"


def hyperlink(request: Recorded) -> Reply:
    return text(HYPERLINK)


async def test_a_csv_output_writes_formulas_as_text_and_jsonl_keeps_them(
        fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    fake_openai.script = hyperlink
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n", quoting=csv.QUOTE_ALL).writerows(
        [["city"], *([cell] for cell in FORMULAS)])
    (tmp_path / "cities.csv").write_text(buffer.getvalue())
    for out in ("out.csv", "out.jsonl"):
        code, _, err = await run(command(fake_openai, tmp_path / "home", "cities.csv",
                                         "--profile", "default", "--prompt", "Describe {city}",
                                         "--out", out), tmp_path)
        assert code == 0, err
    written = (tmp_path / "out.csv").read_bytes().decode()
    header, *rows = list(csv.reader(io.StringIO(written, newline="")))
    assert header == ["city", "item", "status", "result", "error", "session_id", "usage"]
    assert sorted((row[0], row[3]) for row in rows) == sorted(
        ("'" + cell, "'" + HYPERLINK) for cell in FORMULAS)
    assert {r["result"] for r in records(tmp_path / "out.jsonl")} == {HYPERLINK}


async def test_a_fifo_or_a_device_as_input_is_one_stderr_line(
        fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo.csv")  # nobody writes: opening it to read would wait
    device_node(tmp_path / "zero.csv")
    for name, kind in (("fifo.csv", "a FIFO"), ("zero.csv", "a device")):
        code, out, err = await run(command(
            fake_openai, tmp_path / "home", name, "--profile", "default", "--prompt",
            "Describe {city}", "--out", "out.jsonl"), tmp_path)
        assert (code, out) == (1, "")
        assert err == (f"subsessions: input {real(tmp_path)}/{name} is {kind}, not a regular "
                       "file; name a .csv or .jsonl file\n")
    assert not fake_openai.requests
    assert not (tmp_path / "home" / "batches").exists()


async def test_a_journal_naming_a_line_the_input_lacks_is_one_stderr_line(
        fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    fake_openai.script = echo
    write_csv(tmp_path / "cities.csv", 2)
    home = tmp_path / "home"
    code, _, err = await run(command(fake_openai, home, "cities.csv", "--profile", "default",
                                     "--prompt", "Describe {city}", "--out", "out.jsonl"),
                             tmp_path)
    assert code == 0, err
    [journal] = (home / "batches").glob("*.jsonl")
    header, *endings = journal.read_bytes().splitlines(keepends=True)
    options = orjson.loads(header)["options"]
    assert options == {"model": "m", "base_url": fake_openai.base_url, "wire_api": "responses",
                       "sandbox": "workspace-write", "network": False}
    extra = orjson.dumps({**orjson.loads(endings[-1]), "item": 999}) + b"\n"
    for lines, problem in [
        ([header, *endings, extra], "line 4: no item of the input starts on line 999"),
        ([_with_options(header, sandbox="everything"), *endings],
         "line 1: its option sandbox is 'everything'"),
        ([_with_options(header, base_url="ftp://x"), *endings], "line 1: its options: "),
    ]:
        journal.write_bytes(b"".join(lines))
        before = journal.read_bytes()
        code, out, err = await run(command(fake_openai, home, "--resume", journal.stem)[:-6],
                                   tmp_path)  # the model options: from the journal
        assert (code, out) == (1, "")
        assert err.startswith(f"subsessions: batch journal {journal} is damaged ({problem}")
        assert err.endswith("; it is left as it is\n") and err.count("\n") == 1
        assert journal.read_bytes() == before
    assert not fake_openai.requests[2:]  # the first run's two items only


def _with_options(header: bytes, **options: object) -> bytes:
    record = orjson.loads(header)
    return orjson.dumps({**record, "options": {**record["options"], **options}}) + b"\n"


async def test_an_existing_out_is_refused_unless_forced(
        fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    fake_openai.script = echo
    write_csv(tmp_path / "cities.csv", 2)
    (tmp_path / "out.jsonl").write_text("precious\n")
    home = tmp_path / "home"
    batch = ("cities.csv", "--profile", "default", "--prompt", "Describe {city}", "--out",
             "out.jsonl")
    code, out, err = await run(command(fake_openai, home, *batch), tmp_path)
    assert (code, out) == (1, "")
    assert err == ("subsessions: output out.jsonl exists already; name another file, or pass "
                   "--force to replace it\n")
    assert (tmp_path / "out.jsonl").read_text() == "precious\n"
    assert not fake_openai.requests and not (home / "batches").exists()
    code, out, err = await run(command(fake_openai, home, *batch, "--force"), tmp_path)
    assert code == 0, err
    assert sorted(r["item"] for r in records(tmp_path / "out.jsonl")) == [2, 3]


async def test_the_printed_resume_command_works_as_printed(
        fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    """Started with --base-url, --model, --wire-api and --api-key-env, interrupted by
    SIGTERM: the line printed says how to resume, and that command, run as printed with the
    key in the environment as a user has it, finishes the batch on the same server."""
    write_csv(tmp_path / "cities.csv", 4)
    stalled, release = asyncio.Event(), asyncio.Event()

    async def first_two_then_stall(request: Recorded) -> Reply:
        if prompt(request) in ("Describe town2", "Describe town3"):
            stalled.set()
            await release.wait()
        return echo(request)

    fake_openai.script = first_two_then_stall
    home = tmp_path / "home"
    env = {name: value for name, value in os.environ.items()
           if name not in ("OPENAI_API_KEY", "SUBSESSIONS_HOME")}
    env.update(SUBSESSIONS_HOME=str(home), BATCH_TEST_KEY=KEY)  # the default home: no --home
    argv = command(fake_openai, home, "cities.csv", "--profile", "default", "--prompt",
                   "Describe {city}", "--out", "out.jsonl", "--concurrency", "1",
                   "--api-key-env", "BATCH_TEST_KEY")
    at = argv.index("--home")
    del argv[at:at + 2]
    process = await asyncio.create_subprocess_exec(
        *argv, cwd=tmp_path, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL)
    await asyncio.wait_for(stalled.wait(), 40)
    process.send_signal(signal.SIGTERM)
    out, _ = await asyncio.wait_for(process.communicate(), 40)
    assert process.returncode == 128 + signal.SIGTERM
    [journal] = (home / "batches").glob("*.jsonl")
    printed = out.decode().rstrip("\n").split("; resume with: ")[1]
    assert printed == f"subsessions batch --resume {journal.stem}"
    assert KEY.encode() not in journal.read_bytes()  # its variable's name only

    release.set()
    fake_openai.requests.clear()
    words = shlex.split(printed)
    words[0] = str(Path(sys.executable).with_name(words[0]))  # the installed console script
    done = await asyncio.create_subprocess_exec(
        *words, cwd=tmp_path, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(done.communicate(), 50)
    assert done.returncode == 0, err.decode()
    assert f"batch {journal.stem}: 4/4 completed" in out.decode()
    resumed = fake_openai.requests
    assert {prompt(r) for r in resumed} == {"Describe town2", "Describe town3"}
    assert {(r.body["model"], r.api, r.headers["authorization"]) for r in resumed} == {
        ("m", "responses", f"Bearer {KEY}")}
    assert sorted(r["item"] for r in records(tmp_path / "out.jsonl")) == [2, 3, 4, 5]

