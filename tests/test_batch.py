"""Batches in process (DESIGN 3.11): `manager.run_batch` and the `run_batch` tool on the
scripted model, with real files: input streamed, output and journal written, resume, refusals."""

from __future__ import annotations

import asyncio
import csv
import io
import os
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from subsessions import BatchError, Budget, Engine, Session, SessionConfig
from subsessions.batch.journal import journal_path
from subsessions.models.base import ModelRequest
from subsessions.testing import WORKER, Script, call, failure, first_prompt, outputs, value


@pytest.fixture
def script() -> Script:
    return Script(route=first_prompt)


@pytest.fixture
async def engine(home: Path, script: Script) -> AsyncIterator[Engine]:
    async with Engine(home, model_client=script.model) as engine:
        yield engine


@pytest.fixture
async def parent(engine: Engine, tmp_path: Path) -> Session:
    work = tmp_path / "work"
    work.mkdir()
    return await engine.create_session(SessionConfig(
        custom_agents=(WORKER,), cwd=str(work), max_children=64))


def work(parent: Session) -> Path:
    return Path(parent.cwd)


def real(path: Path) -> str:
    return os.path.realpath(path)


def lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def write_csv(path: Path, rows: int) -> None:
    path.write_text("name,n\n" + "".join(f"item{i},{i}\n" for i in range(rows)))


async def test_a_csv_batch_runs_every_row_once_within_its_concurrency(
        parent: Session, script: Script, home: Path) -> None:
    write_csv(work(parent) / "in.csv", 40)
    running, most = [0], [0]

    async def answer(request: ModelRequest) -> list[str]:
        running[0] += 1
        most[0] = max(most[0], running[0])
        for _ in range(3):  # let the other children reach their model call too
            await asyncio.sleep(0)
        running[0] -= 1
        return [f"done: {first_prompt(request)}"]

    for i in range(40):
        script.handlers[f"Handle item{i} (n={i})"] = answer
    result = await parent.subsessions.run_batch(
        "worker", "in.csv", "Handle {name} (n={n})", "out.jsonl", max_concurrency=4)
    assert (result.total, result.completed, result.failed, result.cancelled) == (40, 40, 0, 0)
    assert most[0] == 4  # bounded, and the bound was used
    out = lines(work(parent) / "out.jsonl")
    assert sorted(o["item"] for o in out) == list(range(2, 42))  # line numbers; 1 is the header
    for o in out:
        i = o["item"] - 2
        assert o["status"] == "completed" and o["error"] is None
        assert o["result"] == f"done: Handle item{i} (n={i})"
        assert o["usage"]["turns"] == 1
    journal = journal_path(home, result.batch_id)
    assert stat.S_IMODE(journal.stat().st_mode) == 0o600
    records = lines(journal)
    assert records[0]["type"] == "batch" and records[0]["total"] == 40
    assert sum(r["type"] == "item" for r in records) == 40
    assert parent.subsessions.children() == []  # ended batch children are not kept


async def test_jsonl_input_to_csv_output_and_a_bad_item_in_the_middle(
        parent: Session) -> None:
    source = work(parent) / "in.jsonl"
    source.write_text('{"q": "a"}\n{"q": "b"}\nnot json\n\n{"other": 1}\n[1]\n{"q": {"x": 1}}\n')
    result = await parent.subsessions.run_batch("worker", source, "Q: {q} {{literal}}",
                                                "out.csv", max_concurrency=2)
    assert (result.total, result.completed, result.failed) == (6, 3, 3)
    errors = dict(result.failed_items)
    assert errors[3].startswith("line 3 is not valid JSON")
    assert errors[5] == "line 5 has no field 'q' (the prompt names it)"
    assert errors[6] == "line 6 is not a JSON object"
    text = (work(parent) / "out.csv").read_text().splitlines()
    assert text[0] == "q,item,status,result,error,session_id,usage"
    by_item = {row.split(",")[1]: row for row in text[1:]}
    assert by_item["1"].startswith("a,1,completed,answer to Q: a {literal},,")
    assert by_item["7"].startswith('"{""x"":1}",7,completed,"answer to Q: {""x"":1} {literal}"')
    assert ",5,failed,,line 5 has no field 'q' (the prompt names it),," in by_item["5"]


BAD_INPUTS = {
    "missing": (None, "input {dir}/in.csv does not exist"),
    "not utf-8": (b"name\nok\n\xff\xfe\n", "input {dir}/in.csv is not UTF-8 text (line 3); save it "
                  "as UTF-8"),
    "torn csv": (b'name,n\na,1\nb,"2', "input {dir}/in.csv: its last line (3) is torn (no "
                 "newline at the end and not a whole record); complete or remove it"),
    "wrong width": (b"name,n\na,1\nb,2,3\nc,3\n", "input {dir}/in.csv line 3: 3 fields where the "
                    "header has 2"),
    "missing column": (b"title,n\na,1\n", "the prompt names field {{name}}, but input "
                       "{dir}/in.csv has no such column (it has: title, n)"),
    "empty": (b"", "input {dir}/in.csv is empty: its first line must name the columns"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
async def test_bad_input_is_refused_in_one_line_before_anything_runs(
        parent: Session, script: Script, home: Path, case: str) -> None:
    content, text = BAD_INPUTS[case]
    source = work(parent) / "in.csv"
    if content is not None:
        source.write_bytes(content)
    with pytest.raises(BatchError) as refused:
        await parent.subsessions.run_batch("worker", "in.csv", "Do {name}", "out.jsonl")
    assert str(refused.value) == text.format(dir=real(work(parent)))
    assert not (work(parent) / "out.jsonl").exists()
    assert not (home / "batches").exists() or not any((home / "batches").iterdir())
    assert not script.seen


async def test_a_torn_jsonl_last_line_is_refused(parent: Session) -> None:
    (work(parent) / "in.jsonl").write_text('{"q": 1}\n{"q": 2')
    with pytest.raises(BatchError, match=r"its last line \(2\) is torn"):
        await parent.subsessions.run_batch("worker", "in.jsonl", "{q}", "out.jsonl")
    (work(parent) / "in.jsonl").write_text('{"q": 1}\n{"q": 2}')  # whole, no newline: fine
    result = await parent.subsessions.run_batch("worker", "in.jsonl", "{q}", "out.jsonl")
    assert result.completed == 2


@pytest.mark.parametrize(("template", "problem"), [
    ("Do {name", "the prompt template is malformed (expected '}' before end of string); "
     "write {{ and }} for a literal brace"),
    ("Do {}", "the prompt template has an empty {}; name a field inside it, or write {{ and }} "
     "for a literal brace"),
    ("Do {name!r}", "the prompt template's {name!r} has a format or conversion; only {field} "
     "is supported"),
])
async def test_a_malformed_template_is_refused(parent: Session, template: str,
                                               problem: str) -> None:
    write_csv(work(parent) / "in.csv", 2)
    with pytest.raises(BatchError) as refused:
        await parent.subsessions.run_batch("worker", "in.csv", template, "out.jsonl")
    assert str(refused.value) == problem


async def test_the_tool_answers_counts_and_refuses_paths_outside_the_workspace(
        parent: Session, script: Script, tmp_path: Path) -> None:
    write_csv(work(parent) / "in.csv", 3)
    batch = {"session_type": "worker", "input_path": "in.csv", "prompt": "Do {name}",
             "max_concurrency": None, "budget": None}
    script.play("parent task", [
        lambda outs: [call("run_batch", **batch, output_path="out.jsonl")],
        lambda outs: [call("run_batch", **batch, output_path="../escape.jsonl")],
        lambda outs: [call("run_batch", **batch, output_path="in.csv")],
        lambda outs: [call("run_batch", **{**batch, "session_type": "nobody"},
                           output_path="o.jsonl")],
    ])
    await parent.send_and_wait("parent task")
    outs = outputs(script.seen["parent task"][-1])
    answer = value(outs[0])
    assert set(answer) == {"batch_id", "total", "completed", "failed", "cancelled",
                           "output_path", "failed_items"}
    assert (answer["total"], answer["completed"], answer["failed_items"]) == (3, 3, [])
    assert answer["output_path"] == str(Path(real(work(parent))) / "out.jsonl")
    assert failure(outs[1]) == (f"output ../escape.jsonl is outside the workspace "
                                f"{work(parent)}")
    assert not (tmp_path / "escape.jsonl").exists()
    assert failure(outs[2]) == "output in.csv is the input itself; name another file"
    assert failure(outs[3]).startswith("unknown session_type nobody; expected one of:")


async def test_resume_runs_only_unfinished_items_with_new_limits(
        parent: Session, script: Script, home: Path) -> None:
    write_csv(work(parent) / "in.csv", 6)
    calls: dict[str, int] = {}

    def answer(request: ModelRequest) -> list[Any]:
        prompt = first_prompt(request)
        calls[prompt] = calls.get(prompt, 0) + 1
        if prompt in ("Do item1", "Do item4") and not outputs(request):
            return [call("list_profiles")]  # these need two model calls
        return [f"ok {prompt}"]

    for i in range(6):
        script.handlers[f"Do item{i}"] = answer
    first = await parent.subsessions.run_batch("worker", "in.csv", "Do {name}", "out.jsonl",
                                               max_concurrency=3, budget=Budget(max_turns=1))
    assert (first.completed, first.failed) == (4, 2)
    assert first.failed_items == ((3, "budget exhausted: turns limit 1 reached"),
                                  (6, "budget exhausted: turns limit 1 reached"))
    again = await parent.subsessions.run_batch(
        "worker", "ignored", "ignored", "ignored", max_concurrency=2,
        budget=Budget(max_turns=3), resume=first.batch_id)  # a raised limit
    assert (again.batch_id, again.total, again.completed, again.failed) == (
        first.batch_id, 6, 6, 0)
    assert {p: n for p, n in calls.items() if n != 1} == {"Do item1": 3, "Do item4": 3}
    out = lines(work(parent) / "out.jsonl")
    assert sorted(o["item"] for o in out) == list(range(2, 8))  # one line each
    assert all(o["status"] == "completed" for o in out)
    assert {o["item"]: o["usage"]["turns"] for o in out if o["item"] in (3, 6)} == {3: 2, 6: 2}
    resumed = [r for r in lines(journal_path(home, first.batch_id)) if r["type"] == "resume"]
    assert resumed[0]["budget"]["max_turns"] == 3 and resumed[0]["max_concurrency"] == 2


async def test_a_journal_of_another_input_or_damaged_is_refused_and_left_alone(
        parent: Session, home: Path) -> None:
    write_csv(work(parent) / "in.csv", 2)
    done = await parent.subsessions.run_batch("worker", "in.csv", "Do {name}", "out.jsonl")
    journal = journal_path(home, done.batch_id)
    write_csv(work(parent) / "in.csv", 3)  # the input changed
    before = journal.read_bytes()
    with pytest.raises(BatchError, match=f"batch {done.batch_id} was made from another"):
        await parent.subsessions.run_batch("worker", "", "", "", resume=done.batch_id)
    assert journal.read_bytes() == before
    write_csv(work(parent) / "in.csv", 2)  # its own input again: the journal's lines are read
    damaged = before.replace(b'"type":"item"', b'"type":"item', 1)
    journal.write_bytes(damaged)
    with pytest.raises(BatchError) as refused:
        await parent.subsessions.run_batch("worker", "", "", "", resume=done.batch_id)
    assert str(refused.value) == (f"batch journal {journal} is damaged (line 2: not a JSON "
                                  "object); it is left as it is")
    assert journal.read_bytes() == damaged
    header, *endings = before.splitlines(keepends=True)
    record = orjson.loads(endings[0])
    del record["output"]
    journal.write_bytes(header + orjson.dumps(record) + b"\n")
    with pytest.raises(BatchError, match=r"damaged \(line 2: an item's ending lacks its line, "
                       r"status or output\); it is left as it is"):
        await parent.subsessions.run_batch("worker", "", "", "", resume=done.batch_id)
    with pytest.raises(BatchError, match=r"unknown batch '\.\./x'"):
        await parent.subsessions.run_batch("worker", "", "", "", resume="../x")


async def test_a_cancelled_batch_journals_its_running_children_as_cancelled(
        parent: Session, script: Script, home: Path) -> None:
    write_csv(work(parent) / "in.csv", 5)
    script.hold("Do item2", "Do item3", "Do item4")
    run = asyncio.ensure_future(parent.subsessions.run_batch(
        "worker", "in.csv", "Do {name}", "out.jsonl", max_concurrency=3))
    await script.started("Do item2", "Do item3", "Do item4")
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    records = [r for r in lines(next((home / "batches").iterdir())) if r["type"] == "item"]
    assert {r["item"]: r["status"] for r in records} == {
        2: "completed", 3: "completed", 4: "cancelled", 5: "cancelled", 6: "cancelled"}
    assert sorted(script.cancelled) == ["Do item2", "Do item3", "Do item4"]
    assert parent.subsessions.running() == []


async def test_a_journal_torn_by_a_crash_is_resumed_and_a_running_batch_is_not_run_twice(
        parent: Session, script: Script, home: Path) -> None:
    write_csv(work(parent) / "in.csv", 3)
    script.hold("Do item2")
    run = asyncio.ensure_future(parent.subsessions.run_batch(
        "worker", "in.csv", "Do {name}", "out.jsonl", max_concurrency=3))
    await script.started("Do item2")
    [journal] = (home / "batches").iterdir()
    with pytest.raises(BatchError) as refused:
        await parent.subsessions.run_batch("worker", "", "", "", resume=journal.stem)
    assert str(refused.value) == f"batch {journal.stem} is running in another process"
    script.answer("Do item2", ["late"])
    assert (await run).completed == 3
    whole = journal.read_bytes()
    journal.write_bytes(whole + b'{"type":"item","item":3,"sta')  # a write cut by a crash
    again = await parent.subsessions.run_batch("worker", "", "", "", resume=journal.stem)
    assert (again.total, again.completed) == (3, 3)
    assert journal.read_bytes().startswith(whole + b'{"type":"item","item":3,"sta\n')
    assert len(lines(work(parent) / "out.jsonl")) == 3


async def test_a_tree_limit_below_the_concurrency_holds_items_back_instead_of_failing_them(
        engine: Engine, script: Script, tmp_path: Path) -> None:
    parent = await engine.create_session(SessionConfig(
        custom_agents=(WORKER,), cwd=str(tmp_path), max_children=2))
    write_csv(tmp_path / "in.csv", 9)
    running, most = [0], [0]

    async def answer(request: ModelRequest) -> list[str]:
        running[0] += 1
        most[0] = max(most[0], running[0])
        await asyncio.sleep(0)
        running[0] -= 1
        return ["ok"]

    for i in range(9):
        script.handlers[f"Do item{i}"] = answer
    result = await parent.subsessions.run_batch("worker", "in.csv", "Do {name}", "out.jsonl",
                                                max_concurrency=16)
    assert (result.completed, result.failed) == (9, 0)
    assert most[0] == 2


async def test_a_batch_on_either_backend_completes_every_item(
        home: Path, tmp_path: Path, backend: Any) -> None:
    script = Script(route=first_prompt)
    write_csv(tmp_path / "in.csv", 6)
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        parent = await engine.create_session(SessionConfig(
            custom_agents=(WORKER,), cwd=str(tmp_path), max_children=8))
        result = await parent.subsessions.run_batch("worker", "in.csv", "Do {name}",
                                                    "out.jsonl", max_concurrency=3)
        assert parent.subsessions.children() == []
    assert (result.completed, result.failed) == (6, 0)
    out = sorted((o["item"], o["result"]) for o in lines(tmp_path / "out.jsonl"))
    assert out == [(i + 2, f"answer to Do item{i}") for i in range(6)]


STREAMING = """
import resource, sys
from pathlib import Path
from subsessions.batch.source import items, scan
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
scanned = scan(Path(sys.argv[1]))
count = sum(1 for item in items(scanned) if item.fields is not None)
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(scanned.total, count, grown)
"""


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_million_lines_are_read_as_a_stream(tmp_path: Path, suffix: str) -> None:
    source = tmp_path / f"big{suffix}"
    with open(source, "w") as file:
        if suffix == ".csv":
            file.write("name,text\n")
            file.writelines(f"n{i},some text of forty characters {i:07d}\n"
                            for i in range(1_000_000))
        else:
            file.writelines(f'{{"name": "n{i}", "text": "some text {i:07d}"}}\n'
                            for i in range(1_000_000))
    assert source.stat().st_size > 40 << 20
    done = subprocess.run([sys.executable, "-c", STREAMING, str(source)], check=True,
                          capture_output=True, text=True, timeout=50,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    total, count, grown_kib = map(int, done.stdout.split())
    assert total == count == 1_000_000
    assert grown_kib < 8 << 10  # under 8 MiB for a file of over 40 MiB


async def test_a_resumed_csv_output_keeps_one_header_and_one_row_per_item(
        parent: Session, script: Script) -> None:
    write_csv(work(parent) / "in.csv", 4)
    tries: dict[str, int] = {}

    def once_flaky(request: ModelRequest) -> list[str]:
        prompt = first_prompt(request)
        tries[prompt] = tries.get(prompt, 0) + 1
        if prompt == "Do item2" and tries[prompt] == 1:
            raise RuntimeError("provider hiccup")
        return [f"ok, {prompt}\nsecond line"]  # a comma and a newline: quoted in the CSV

    for i in range(4):
        script.handlers[f"Do item{i}"] = once_flaky
    first = await parent.subsessions.run_batch("worker", "in.csv", "Do {name}", "out.csv")
    assert (first.completed, first.failed) == (3, 1)
    again = await parent.subsessions.run_batch("worker", "", "", "", resume=first.batch_id)
    assert (again.completed, again.failed) == (4, 0)
    rows = list(csv.DictReader(io.StringIO((work(parent) / "out.csv").read_text())))
    assert sorted((r["item"], r["name"], r["status"], r["result"]) for r in rows) == [
        (str(i + 2), f"item{i}", "completed", f"ok, Do item{i}\nsecond line") for i in range(4)]


async def test_a_resume_keeps_the_journals_concurrency_and_refuses_a_bad_one_unwritten(
        parent: Session, script: Script, home: Path) -> None:
    write_csv(work(parent) / "in.csv", 3)
    first = await parent.subsessions.run_batch("worker", "in.csv", "Do {name}", "out.jsonl",
                                               max_concurrency=3, budget=Budget(max_turns=1))
    journal = journal_path(home, first.batch_id)
    before = journal.read_bytes()
    with pytest.raises(BatchError, match="max_concurrency must be a whole number"):
        await parent.subsessions.run_batch("worker", "", "", "", max_concurrency=-1,
                                           resume=first.batch_id)
    assert journal.read_bytes() == before  # refused before anything was written
    await parent.subsessions.run_batch("worker", "", "", "", resume=first.batch_id)
    resumed = [r for r in lines(journal) if r["type"] == "resume"]
    assert resumed[-1]["max_concurrency"] == 3  # the journal's, not a default
