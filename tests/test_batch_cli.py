"""`subsessions batch` as a real process against the real openai SDK over loopback: progress,
the summary line, refusals in one line, and a SIGKILL mid-batch that `--resume` repairs."""

from __future__ import annotations

import asyncio
import os
import pty
import signal
import sys
from pathlib import Path

import orjson
import pytest
from fake_openai import FakeOpenAI, Recorded, Reply, fake_openai, text
from test_openai_models import user_texts

__all__ = ["fake_openai"]  # the fixture, imported so that pytest finds it here


def prompt(request: Recorded) -> str:
    return user_texts(request)[-1]


def command(fake: FakeOpenAI, home: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "subsessions", "batch", *args, "--home", str(home),
            "--base-url", fake.base_url, "--model", "m", "--wire-api", "responses"]


async def run(argv: list[str], cwd: Path) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *argv, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")})
    out, err = await asyncio.wait_for(process.communicate(), 50)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def real(path: Path) -> str:
    return os.path.realpath(path)


def write_csv(path: Path, rows: int) -> None:
    path.write_text("city\n" + "".join(f"town{i}\n" for i in range(rows)))


def records(path: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def whole_records(path: Path) -> list[dict[str, object]]:
    """The lines written whole so far (a line being written is not one yet)."""
    return [orjson.loads(line) for line in path.read_bytes().splitlines(keepends=True)
            if line.endswith(b"\n") and line.strip()]


def echo(request: Recorded) -> Reply:
    return text(f"about {prompt(request)}").with_usage(10, 5)


async def test_a_batch_prints_plain_progress_and_a_summary(
        fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    fake_openai.script = echo
    write_csv(tmp_path / "cities.csv", 12)
    code, out, err = await run(command(
        fake_openai, tmp_path / "home", "cities.csv", "--profile", "default", "--prompt",
        "Describe {city}", "--out", "out.jsonl", "--concurrency", "3",
        "--progress-every", "0"), tmp_path)
    assert code == 0, err
    [line] = out.splitlines()
    assert line.startswith("batch ")
    assert line.endswith(f": 12/12 completed, 0 failed, 0 cancelled; output "
                         f"{real(tmp_path / 'out.jsonl')}")
    assert "\x1b" not in err  # no terminal: no escape codes
    assert "12/12 done (12 completed, 0 failed, 0 cancelled), 0 running, 180 tokens" in err
    results = {r["item"]: r["result"] for r in records(tmp_path / "out.jsonl")}
    assert results == {i + 2: f"about Describe town{i}" for i in range(12)}


async def test_on_a_terminal_the_progress_is_a_bar(
        fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    fake_openai.script = echo
    write_csv(tmp_path / "cities.csv", 4)
    leader, follower = pty.openpty()
    try:
        process = await asyncio.create_subprocess_exec(
            *command(fake_openai, tmp_path / "home", "cities.csv", "--profile", "default",
                     "--prompt", "Describe {city}", "--out", "out.jsonl"),
            cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=follower,
            env={**os.environ, "COLUMNS": "160", "TERM": "xterm"})
        os.close(follower)
        follower = -1
        out, _ = await asyncio.wait_for(process.communicate(), 50)
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the process is gone and everything was read
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    screen = shown.decode(errors="replace")
    assert process.returncode == 0, screen
    assert "\x1b[" in screen and "━" in screen  # rich's bar, drawn with escape codes
    assert "4/4" in screen and "4 completed" in screen and "ETA" in screen
    assert "4/4 completed" in out.decode()


@pytest.mark.parametrize(("case", "args", "problem"), [
    ("missing", ("nope.csv", "--out", "out.jsonl"), "input {dir}/nope.csv does not exist"),
    ("same file", ("cities.csv", "--out", "cities.csv"),
     "output cities.csv is the input itself; name another file"),
    ("outside", ("cities.csv", "--out", "../out.jsonl"),
     "output ../out.jsonl is outside the workspace {dir}"),
    ("missing field", ("cities.csv", "--out", "out.jsonl", "--prompt", "Describe {town}"),
     "the prompt names field {{town}}, but input {dir}/cities.csv has no such column (it has: "
     "city)"),
])
async def test_bad_input_is_one_stderr_line_and_exit_1(
        fake_openai: FakeOpenAI, tmp_path: Path, case: str, args: tuple[str, ...],
        problem: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    write_csv(work / "cities.csv", 2)
    rest = ("--prompt", "Describe {city}") if "--prompt" not in args else ()
    code, out, err = await run(command(fake_openai, tmp_path / "home", *args, "--profile",
                                       "default", *rest), work)
    assert (code, out) == (1, "")
    assert err == f"subsessions: {problem.format(dir=real(work))}\n"
    assert not fake_openai.requests
    assert not (tmp_path / "out.jsonl").exists()


async def test_a_sigkill_mid_batch_loses_nothing_and_resume_runs_no_item_twice(
        fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    write_csv(tmp_path / "cities.csv", 30)
    released = asyncio.Event()

    async def first_ten_then_stall(request: Recorded) -> Reply:
        number = int(prompt(request).removeprefix("Describe town"))
        if number >= 10:
            await released.wait()
        return echo(request)

    fake_openai.script = first_ten_then_stall
    home = tmp_path / "home"
    process = await asyncio.create_subprocess_exec(
        *command(fake_openai, home, "cities.csv", "--profile", "default", "--prompt",
                 "Describe {city}", "--out", "out.jsonl", "--concurrency", "4"),
        cwd=tmp_path, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        async with asyncio.timeout(40):  # bounded poll of the journal
            while True:
                journals = list((home / "batches").glob("*.jsonl")) if (
                    home / "batches").is_dir() else []
                done = [r for r in whole_records(journals[0])[1:]
                        if r["status"] == "completed"] if journals else []
                if len(done) == 10 and len(fake_openai.requests) >= 14:
                    break
                await asyncio.sleep(0.05)
    finally:
        process.send_signal(signal.SIGKILL)
        await process.wait()
    [journal] = journals
    batch_id = journal.stem
    journaled = {r["item"] for r in records(journal)[1:] if r["status"] == "completed"}
    assert journaled == set(range(2, 12))
    # the kill may fall between an ending's journal line and its output line: never before
    assert {r["item"] for r in records(tmp_path / "out.jsonl")} <= journaled
    # the completed items (lines 2-11) are towns 0-9; their requests arrive in any order
    before = {f"Describe town{n}" for n in range(10)}
    assert before <= {prompt(r) for r in fake_openai.requests}

    released.set()
    fake_openai.requests.clear()
    code, out, err = await run(command(fake_openai, home, "--resume", batch_id,
                                       "--budget-turns", "3"), tmp_path)
    assert code == 0, err
    assert f"batch {batch_id}: 30/30 completed" in out
    again = [prompt(r) for r in fake_openai.requests]
    assert len(again) == 20 and not set(again) & before  # no completed item ran twice
    out_items = sorted(r["item"] for r in records(tmp_path / "out.jsonl"))
    assert out_items == list(range(2, 32))  # every item, one line each


async def test_sigterm_cancels_the_running_items_journals_them_and_says_how_to_resume(
        fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    write_csv(tmp_path / "cities.csv", 5)
    never, both = asyncio.Event(), asyncio.Event()

    async def stall(request: Recorded) -> Reply:
        if len(fake_openai.requests) == 2:
            both.set()  # both slots are at their model call
        await never.wait()
        return echo(request)

    fake_openai.script = stall
    home = tmp_path / "home"
    process = await asyncio.create_subprocess_exec(
        *command(fake_openai, home, "cities.csv", "--profile", "default", "--prompt",
                 "Describe {city}", "--out", "out.jsonl", "--concurrency", "2"),
        cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    await asyncio.wait_for(both.wait(), 40)
    process.send_signal(signal.SIGTERM)
    out, _ = await asyncio.wait_for(process.communicate(), 40)
    assert process.returncode == 128 + signal.SIGTERM
    [journal] = (home / "batches").glob("*.jsonl")
    assert out.decode() == (f"batch {journal.stem} interrupted: 0/5 completed; resume with: "
                            f"subsessions --home {home} batch --resume {journal.stem}\n")
    endings = [r for r in records(journal)[1:] if r["type"] == "item"]
    assert sorted((r["item"], r["status"]) for r in endings) == [(2, "cancelled"),
                                                                  (3, "cancelled")]


async def test_resume_mistakes_are_one_stderr_line(fake_openai: FakeOpenAI,
                                                   tmp_path: Path) -> None:
    home = tmp_path / "home"
    unknown = "01a2158e-0000-7000-8000-000000000000"
    for args, problem in [
        (("--resume", unknown), f"unknown batch {unknown}: no journal "
         f"{home}/batches/{unknown}.jsonl"),
        (("--resume", "../../etc/passwd"), "unknown batch '../../etc/passwd': a batch id is "
         "the uuid a batch printed when it started"),
        (("cities.csv", "--resume", unknown), "--resume runs the batch as it was made; drop "
         "INPUT"),
        (("cities.csv", "--profile", "default"), "batch needs --prompt, --out (or --resume "
         "BATCH_ID)"),
    ]:
        code, out, err = await run(command(fake_openai, home, *args), tmp_path)
        assert (code, out, err) == (1, "", f"subsessions: {problem}\n")
