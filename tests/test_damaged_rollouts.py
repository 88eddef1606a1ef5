"""`subsessions rollouts ...` on what crashes, other tools and Codex leave in a home.

Each case is a real file read by the real CLI in a subprocess: it must show what can
be shown, exit 0 and print nothing on stderr, never a traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from subsessions import Engine, ScriptedModel, Session, SessionConfig
from subsessions.mcp.transcript import render_transcript
from subsessions.rollouts import list_rollouts, read_rollout
from subsessions.rollouts.index import INDEX_NAME
from subsessions.rollouts.recorder import rollout_path

START = 1_790_000_000.0  # 2026-09-21


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "subsessions", *args, "--home", str(home)],
        capture_output=True, text=True, timeout=120, check=False,
    )


def ok(home: Path, *args: str) -> str:
    """stdout of a command that must succeed quietly."""
    result = cli(home, *args)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    return result.stdout


def uuid7_at(seconds: float) -> str:
    return str(uuid.UUID(int=(int(seconds * 1000) << 80) | (0x7 << 76) | (0b10 << 62)))


def record(kind: str, payload: dict[str, Any], stamp: str = "2026-09-21T12:00:01.000Z") -> bytes:
    return orjson.dumps({"timestamp": stamp, "type": kind, "payload": payload}) + b"\n"


def event(kind: object, **fields: Any) -> bytes:
    return record("event_msg", {"type": kind, **fields})


def write(
    home: Path, *lines: bytes, started: float = START, parent: str | None = None, **meta: Any
) -> str:
    """A rollout laid out as the engine lays it out; `meta` adds to or replaces its fields."""
    session_id = uuid7_at(started)
    payload: dict[str, Any] = {
        "id": session_id, "timestamp": "2026-09-21T12:00:00Z", "cwd": "/work",
        "originator": "subsessions", "model": "m", "model_provider": "scripted",
        "source": "exec" if parent is None else {
            "subsession": {"parent_session_id": parent, "depth": 1, "session_type": "tester"}},
        **({} if parent is None else {"session_type": "tester"}), **meta,
    }
    path = Path(rollout_path(home, session_id, started))
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = payload["timestamp"] if isinstance(payload["timestamp"], str) else "x"
    path.write_bytes(record("session_meta", payload, stamp) + b"".join(lines))
    return session_id


TASK = (event("task_started"), event("task_complete", last_agent_message="done"))


# -- 1. values no reader expected -----------------------------------------------------------

@pytest.mark.parametrize("stamp", ["9999-12-31T23:59:59.999-23:59", "0001-01-01T00:00:00+14:00"])
def test_a_time_at_the_edge_of_the_calendar_shows_as_written(home: Path, stamp: str) -> None:
    session_id = write(home, *TASK, timestamp=stamp)
    row = ok(home, "rollouts", "list").splitlines()[1]
    assert stamp in row and "completed" in row
    assert orjson.loads(ok(home, "rollouts", "list", "--json"))["started"] == stamp
    assert f"  started  {stamp}  source exec\n" in ok(home, "rollouts", "show", session_id)
    assert session_id in ok(home, "rollouts", "tree")
    assert ok(home, "rollouts", "tail", session_id).endswith("  * task complete\n")


def test_numbers_where_text_belongs_show_as_numbers(home: Path) -> None:
    session_id = write(
        home,
        event("task_started"),
        record("response_item", {"type": "message", "role": "user", "content": 5}),
        record("response_item", {"type": "message", "role": "assistant",
                                 "content": [{"type": "output_text", "text": 7}]}),
        record("response_item", {"type": "reasoning", "summary": 9}),
        record("response_item", {"type": "reasoning",
                                 "summary": [{"type": "summary_text", "text": 11}]}),
        event("task_complete", last_agent_message=13),
        session_type=42, model=3.5,
    )
    shown = ["[user] 5", "[assistant] 7", "  (reasoning) 9", "  (reasoning) 11",
             "  * task complete"]
    assert ok(home, "rollouts", "show", session_id).splitlines()[-5:] == shown
    assert ok(home, "rollouts", "tail", session_id).splitlines()[-5:] == shown
    _, row = ok(home, "rollouts", "list").splitlines()
    assert row.split()[4:7] == ["42", "3.5", "completed"]
    assert orjson.loads(ok(home, "rollouts", "list", "--json"))["profile"] == "42"
    assert ok(home, "rollouts", "tree").split()[1] == "42"
    assert read_rollout(list_rollouts(home)[0].path).last_agent_message == "13"


def test_records_of_odd_types_are_skipped_or_shown(home: Path) -> None:
    odd_record = orjson.dumps({"timestamp": 1, "type": {"a": 1}, "payload": {}}) + b"\n"
    session_id = write(home, event("task_started"), odd_record, event(["task_complete"]),
                       event("task_complete", last_agent_message="ok"))
    shown = ok(home, "rollouts", "show", session_id).splitlines()
    assert shown[-3:] == ['  * ["task_complete"]', "  * task complete",
                          "  ! skipped line 3: unknown record type"]
    assert ok(home, "rollouts", "tail", session_id).splitlines()[-3:] == [
        "  ! an unreadable line", '  * ["task_complete"]', "  * task complete"]
    assert orjson.loads(ok(home, "rollouts", "list", "--json"))["status"] == "completed"


def test_an_index_entry_with_numbers_for_names_shows_them(home: Path) -> None:
    # Past 128 files a listing reads the oldest rows from sessions/index.jsonl.
    oldest = write(home, *TASK, started=START)
    for n in range(1, 130):
        write(home, *TASK, started=START + n)
    assert len(ok(home, "rollouts", "list", "--limit", "0").splitlines()) == 131
    index = home / "sessions" / INDEX_NAME
    lines = index.read_bytes().splitlines()
    entries = [orjson.loads(line) for line in lines[1:]]
    (entry,) = [e for e in entries if e[0] == oldest]
    entry[16], entry[17] = 42, 7  # profile, model
    index.write_bytes(b"\n".join([lines[0], *(orjson.dumps(e) for e in entries)]) + b"\n")

    last = ok(home, "rollouts", "list", "--limit", "0").splitlines()[-1]
    assert oldest.startswith(last.split()[0]) and last.split()[4:7] == ["42", "7", "completed"]


@pytest.mark.parametrize("since", ["99999999d", "999999999999999999999s", "0001-01-01"])
def test_a_since_older_than_the_calendar_lists_everything(home: Path, since: str) -> None:
    session_id = write(home, *TASK)
    assert orjson.loads(ok(home, "rollouts", "list", "--json", "--since", since))["id"] == (
        session_id
    )


# -- 2. parent cycles -----------------------------------------------------------------------

def test_sessions_in_a_parent_cycle_are_shown_and_marked(home: Path) -> None:
    a, b, c = uuid7_at(START), uuid7_at(START + 1), uuid7_at(START + 2)
    write(home, *TASK, started=START, parent=b)  # a and b name each other
    write(home, *TASK, started=START + 1, parent=a)
    write(home, *TASK, started=START + 2, parent=c)  # c names itself
    d = write(home, *TASK, started=START + 3)  # an ordinary root
    e = write(home, *TASK, started=START + 4, parent=d)
    f = write(home, *TASK, started=START + 5, parent=b)  # hangs off the cycle

    out = ok(home, "rollouts", "tree")
    for session_id, name in {a: "<A>", b: "<B>", c: "<C>", d: "<D>", e: "<E>", f: "<F>"}.items():
        out = out.replace(session_id, name)
    assert out == (
        "<A>  tester        completed   1.00s  (parent cycle: its parent <B> is below it)\n"
        "└── <B>  tester        completed   1.00s\n"
        "    └── <F>  tester        completed   1.00s\n"
        "<C>  tester        completed   1.00s  (parent cycle: names itself as its parent)\n"
        "<D>  exec          completed   1.00s\n"
        "└── <E>  tester        completed   1.00s\n"
    )
    assert ok(home, "rollouts", "tree", a).splitlines()[0].endswith(
        f"(parent cycle: its parent {b} is below it)")


# -- 3. a long first line -------------------------------------------------------------------

@pytest.fixture
async def long_instructions(home: Path) -> Session:
    """A finished session whose instructions (in its session_meta line) are 5 MB long."""
    instructions = "Follow the style guide.\n" + "x" * (5 << 20)
    async with Engine(home, model_client=ScriptedModel([["fine"]])) as engine:
        session = await engine.create_session(SessionConfig(instructions=instructions))
        assert await session.send_and_wait("go") == "fine"
    return session


def test_a_session_with_megabytes_of_instructions_is_listed(
    home: Path, long_instructions: Session
) -> None:
    session = long_instructions
    meta_line = Path(session.recorder.path).read_bytes().split(b"\n", 1)[0]
    assert len(meta_line) > 5 << 20  # the engine wrote it whole

    row = orjson.loads(ok(home, "rollouts", "list", "--json"))
    assert (row["id"], row["status"]) == (session.session_id, "completed")
    assert session.session_id in ok(home, "rollouts", "tree")
    shown = ok(home, "rollouts", "show", session.session_id)
    assert "  instructions: Follow the style guide. ...\n" in shown
    assert len(shown) < 10_000  # the first line of the instructions, not five megabytes
    assert ok(home, "rollouts", "tail", session.session_id, "-n", "1").endswith(
        "  * task complete\n")


# -- 13. one word per state -----------------------------------------------------------------

@pytest.fixture
def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_every_reader_names_a_state_with_the_same_word(home: Path, dead_pid: int) -> None:
    now = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    started = event("task_started")
    cases = {
        "completed": (started, event("task_complete", last_agent_message="ok")),
        "failed": (started, event("error", message="boom")),
        "cancelled": (started, event("turn_aborted", reason="cancelled")),
        "interrupted": (started,),  # its writer is gone
        "running": (started,),  # its writer is this test
        "idle": (),
    }
    expected = {}
    for n, (word, lines) in enumerate(cases.items()):
        pid = os.getpid() if word == "running" else dead_pid
        session_id = write(home, *lines, started=now - 10 + n, pid=pid, timestamp=stamp)
        expected[session_id] = word

    listed = [orjson.loads(line) for line in ok(home, "rollouts", "list", "--json").splitlines()]
    assert {row["id"]: row["status"] for row in listed} == expected
    for row in listed:
        rollout = read_rollout(row["path"])
        assert rollout.status == row["status"]
        assert f"\nstatus: {row['status']}\n" in render_transcript(rollout)
        assert f"  status   {row['status']}  (" in ok(home, "rollouts", "show", row["id"])
    failed = next(r for r in listed if r["status"] == "failed")
    assert "\nstatus: failed\nerror: boom\n" in render_transcript(read_rollout(failed["path"]))
