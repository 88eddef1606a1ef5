"""`subsessions rollouts list / show / tree / tail`, run in process on plain (piped) output."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from scripting import call

from subsessions import Engine, ModelRequest, ScriptedModel
from subsessions.cli import main
from subsessions.rollouts import find_rollout, list_rollouts, summarise
from subsessions.rollouts.follow import Tail
from subsessions.rollouts.recorder import rollout_path
from subsessions.rollouts.render import Style, render_record, wants_colour

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str], home: Path) -> Run:
    """Runs the real entry point in process: (exit code, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        code = main([*args, "--home", str(home)])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


async def three_levels(request: ModelRequest) -> list[Any]:
    """plan -> default "check the sum" -> mathematician "add 2 and 2"; each waits for its child."""
    prompt = request.items[0]["content"][0]["text"]
    outputs = [orjson.loads(i["output"]) for i in request.items
               if i["type"] == "function_call_output"]
    child = {"plan": ("default", "check the sum"),
             "check the sum": ("mathematician", "add 2 and 2")}
    if prompt in child and not outputs:
        kind, task = child[prompt]
        return [call("create_session", session_type=kind, prompt=task)]
    if prompt in child and len(outputs) == 1:
        return [call("wait_session", session_id=outputs[0]["session_id"], timeout_ms=5000)]
    return {"plan": ["All checked: 4"], "check the sum": ["the sum is 4"]}.get(prompt, ["4"])


@pytest.fixture
async def tree(home: Path) -> dict[str, str]:
    async with Engine(home, model_client=ScriptedModel(three_levels)) as engine:
        parent = await engine.create_session()
        assert await parent.send_and_wait("plan") == "All checked: 4"
    (child,) = list_rollouts(home, parent=parent.session_id)
    (grandchild,) = list_rollouts(home, parent=child.session_id)
    return {parent.session_id: "<P>", child.session_id: "<C>", grandchild.session_id: "<G>"}


def normalise(text: str, names: dict[str, str]) -> str:
    for session_id, name in names.items():
        text = text.replace(session_id, name)
    text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "<time>", text)
    text = re.sub(r"\b\d+\.\d\ds\b", "<dur>", text)
    return re.sub(r"call_\d+", "call_*", text)


def test_show_is_a_readable_transcript(run: Run, tree: dict[str, str]) -> None:
    parent = next(i for i, n in tree.items() if n == "<P>")
    code, out, err = run("rollouts", "show", parent[:18])
    assert (code, err) == (0, "")
    header, _, transcript = normalise(out, tree).partition("\n-- task started")
    assert header.splitlines()[0] == "session <P>  (exec)"
    assert re.search(r"^  status   completed  \(<dur>, \d+ tokens\)$", header, re.M), header
    assert "\x1b[" not in out  # piped: plain
    assert transcript == """ <time> --
[user] plan
  -> create_session({"session_type":"default","prompt":"check the sum"})  [call_*]
  * spawned child session <C> with model scripted
  <- ok: {"session_id":"<C>"}
  -> wait_session({"session_id":"<C>","timeout_ms":5000})  [call_*]
  * child session <C> completed
  <- ok: {"result":"the sum is 4"}
[assistant] All checked: 4
  * task complete
"""


def test_show_of_a_child_names_its_parent(run: Run, tree: dict[str, str]) -> None:
    child = next(i for i, n in tree.items() if n == "<C>")
    code, out, _ = run("rollouts", "show", child)
    text = normalise(out, tree)
    assert code == 0
    assert text.splitlines()[0] == "session <C>  (default)"
    assert "  parent   <P>  (depth 1)\n" in text
    assert "[user] check the sum\n" in text
    assert '  <- ok: {"result":"4"}\n[assistant] the sum is 4\n  * task complete\n' in text


def test_tree_nests_three_levels(run: Run, tree: dict[str, str]) -> None:
    code, out, _ = run("rollouts", "tree")
    assert code == 0
    assert normalise(out, tree) == (
        "<P>  exec          completed   <dur>\n"
        "└── <C>  default       completed   <dur>\n"
        "    └── <G>  mathematician completed   <dur>\n"
    )
    child = next(i for i, n in tree.items() if n == "<C>")
    code, out, _ = run("rollouts", "tree", child[:18])
    assert normalise(out, tree) == (
        "<C>  default       completed   <dur>\n"
        "└── <G>  mathematician completed   <dur>\n"
    )


def test_list_table_and_json(run: Run, tree: dict[str, str]) -> None:
    code, out, err = run("rollouts", "list")
    assert (code, err) == (0, "")
    header, *lines = out.splitlines()
    assert header.split() == [
        "id", "started", "source", "profile", "model", "status", "duration", "tokens"
    ]
    newest_first = sorted(tree, reverse=True)
    for line, session_id in zip(lines, newest_first, strict=True):
        prefix, _day, _clock, source, _profile, model, status, duration, tokens = line.split()
        assert session_id.startswith(prefix) and len(prefix) >= 8
        assert [i for i in tree if i.startswith(prefix)] == [session_id]
        assert (source, status, model) == (
            "exec" if tree[session_id] == "<P>" else "subsession", "completed", "scripted"
        )
        assert re.fullmatch(r"\d+\.\d\ds", duration) and int(tokens) > 0
    code, out, _ = run("rollouts", "list", "--json")
    rows = [orjson.loads(line) for line in out.splitlines()]
    assert [r["id"] for r in rows] == newest_first
    assert [r["profile"] for r in rows] == ["mathematician", "default", None]
    assert {"started", "source", "model", "status", "parent", "duration", "tokens", "path",
            "cursor"} <= set(rows[0])


def test_list_filters_and_pages(run: Run, tree: dict[str, str]) -> None:
    parent, child, grandchild = sorted(tree)
    _, out, _ = run("rollouts", "list", "--json", "--parent", parent[:18])
    assert [orjson.loads(line)["id"] for line in out.splitlines()] == [child]
    _, out, _ = run("rollouts", "list", "--json", "--source", "exec")
    assert [orjson.loads(line)["id"] for line in out.splitlines()] == [parent]
    _, out, _ = run("rollouts", "list", "--json", "--status", "running")
    assert out == ""
    _, out, _ = run("rollouts", "list", "--json", "--since", "1h")
    assert len(out.splitlines()) == 3
    _, out, _ = run("rollouts", "list", "--json", "--since", "2999-01-01")
    assert out == ""
    _, out, err = run("rollouts", "list", "--json", "--limit", "2")
    assert [orjson.loads(line)["id"] for line in out.splitlines()] == [grandchild, child]
    assert err == f"(more: --cursor {child})\n"
    _, out, err = run("rollouts", "list", "--json", "--limit", "2", "--cursor", child)
    assert [orjson.loads(line)["id"] for line in out.splitlines()] == [parent]
    assert err == ""


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("show", "../x"), "../x"),
        (("show", "a/b"), "a/b"),
        (("tail", ".."), ".."),
        (("tree", "ffffffff"), "unknown session ffffffff"),
        (("list", "--since", "yesterday"), "--since"),
        (("list", "--cursor", "../etc"), "../etc"),
        (("list", "--parent", "nope"), "nope"),
        (("list", "--limit", "-1"), "--limit"),
    ],
)
def test_mistakes_are_one_line_errors(
    run: Run, tree: dict[str, str], args: tuple[str, ...], needle: str
) -> None:
    code, out, err = run("rollouts", *args)
    assert code == 1 and out == ""
    assert len(err.strip().splitlines()) == 1 and needle in err, err


def test_a_file_that_is_not_ours_is_named(run: Run, home: Path) -> None:
    session_id = "01a1fe5f-55b5-7a6c-8914-8bae8816c256"
    path = Path(rollout_path(home, session_id, 1_790_000_000))
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"a": 1}\n')
    for action in ("show", "tail"):
        code, out, err = run("rollouts", action, session_id[:8])
        assert code == 1 and out == ""
        assert err == (
            f"subsessions: {path}: not a subsessions rollout (no session_meta first line)\n"
        )
    code, out, err = run("rollouts", "list")
    assert code == 1 and out == ""  # nothing to list: no empty table
    assert str(path) in err and f"no readable sessions in {home}" in err


def test_colour_only_on_a_terminal_without_no_color(
    run: Run, tree: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("TERM", raising=False)
    assert wants_colour(Terminal())
    assert not wants_colour(io.StringIO())
    assert wants_colour(io.StringIO(), "always") and not wants_colour(Terminal(), "never")
    monkeypatch.setenv("NO_COLOR", "1")
    assert not wants_colour(Terminal())
    _, out, _ = run("rollouts", "tree", "--color", "always")
    assert "\x1b[32mcompleted" in out
    _, out, _ = run("rollouts", "show", sorted(tree)[0], "--color", "always")
    assert "\x1b[1;36m[user]\x1b[0m plan" in out


# -- tail ----------------------------------------------------------------------------------


def test_tail_prints_the_last_records(run: Run, tree: dict[str, str], home: Path) -> None:
    parent = sorted(tree)[0]
    code, out, _ = run("rollouts", "tail", parent, "-n", "2")
    assert code == 0
    assert normalise(out, tree) == (
        "session <P>  (exec, completed)\n[assistant] All checked: 4\n  * task complete\n"
    )
    code, out, _ = run("rollouts", "tail", parent, "-n", "3", "--raw")
    assert out.splitlines() == find_rollout(home, parent).read_text().splitlines()[-3:]
    code, out, _ = run("rollouts", "tail", parent, "--follow")  # it has ended: no waiting
    assert code == 0 and out.endswith("  * task complete\n")


def line(kind: str, **payload: Any) -> bytes:
    return orjson.dumps({"timestamp": "2026-09-21T12:00:01.000Z", "type": "event_msg",
                         "payload": {"type": kind, **payload}}) + b"\n"


def hand_made(home: Path, pid: int, *lines: bytes) -> Path:
    started = time.time()
    session_id = "01a1fe5f-55b5-7a6c-8914-8bae8816c256"
    meta = {"id": session_id, "source": "exec", "pid": pid,
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))}
    path = Path(rollout_path(home, session_id, started))
    path.parent.mkdir(parents=True)
    head = orjson.dumps({"timestamp": "2026-09-21T12:00:00.000Z", "type": "session_meta",
                         "payload": meta})
    path.write_bytes(head + b"\n" + b"".join(lines))
    return path


def test_follow_prints_lines_as_written_and_stops_at_the_ending(home: Path) -> None:
    path = hand_made(home, os.getpid(), line("task_started"))
    later = [line("background_event", message="one"), b'{"timestamp":"2026-09-21T12:00:02',
             b'.000Z","type":"event_msg","payload":{"type":"background_event","message":"two"}}\n',
             line("task_complete"), line("background_event", message="after the end")]
    polls: list[float] = []

    def sleep(seconds: float) -> None:  # the writer writes while the follower waits
        polls.append(seconds)
        with path.open("ab") as f:
            f.write(later.pop(0))

    tail = Tail(summarise(str(path)), interval=0.5)
    assert tail.status == "running"
    assert tail.last(5) == path.read_bytes().splitlines()
    seen = [orjson.loads(x)["payload"].get("message") for x in tail.follow(sleep)]
    assert seen == ["one", "two", None]  # a torn line waits for its end; stops at task_complete
    assert tail.status == "completed" and not tail.writer_gone
    assert polls == [0.5] * 4


def test_follow_stops_when_the_writer_is_gone(home: Path) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        path = hand_made(home, sleeper.pid, line("task_started"))
        tail = Tail(summarise(str(path)), interval=0.01)
        assert tail.status == "running"

        def sleep(seconds: float) -> None:
            with path.open("ab") as f:
                f.write(line("background_event", message="last words"))
            sleeper.kill()
            sleeper.wait()

        seen = list(tail.follow(sleep))
    finally:
        sleeper.kill()
        sleeper.wait()
    assert [orjson.loads(x)["payload"]["message"] for x in seen] == ["last words"]
    assert (tail.status, tail.writer_gone) == ("interrupted", True)


LIVE = r"""
import asyncio, sys
from pathlib import Path
from subsessions import Engine, ScriptedModel

async def main(home):
    async def model(request):
        path = Path(session.recorder.path)
        while not path.exists() or b"user_message" not in path.read_bytes():
            await asyncio.sleep(0.01)
        print(session.session_id, flush=True)
        await asyncio.to_thread(sys.stdin.readline)  # until the test says go
        return ["all done"]

    async with Engine(home, model_client=ScriptedModel(model)) as engine:
        session = await engine.create_session()
        await session.send_and_wait("please work")

asyncio.run(main(sys.argv[1]))
"""


def test_tail_follow_on_a_live_session(home: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    writer = subprocess.Popen([sys.executable, "-c", LIVE, str(home)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env)
    follower: subprocess.Popen[str] | None = None
    watchdog = threading.Timer(30, writer.kill)
    watchdog.start()
    try:
        assert writer.stdout is not None and writer.stdin is not None
        session_id = writer.stdout.readline().strip()
        follower = subprocess.Popen(
            [sys.executable, "-m", "subsessions", "rollouts", "tail", session_id[:13],
             "--follow", "--interval", "0.02", "--home", str(home)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
        assert follower.stdout is not None
        printed = [follower.stdout.readline() for _ in range(3)]
        assert printed[0] == f"session {session_id}  (exec, running)\n"
        assert printed[2] == "[user] please work\n"
        writer.stdin.write("go\n")
        writer.stdin.flush()
        rest, err = follower.communicate(timeout=20)
        assert follower.returncode == 0, err
        assert rest.endswith("[assistant] all done\n  * task complete\n"), rest
        assert writer.wait(20) == 0
    finally:
        watchdog.cancel()
        for proc in (writer, follower):
            if proc is not None:
                proc.kill()
                proc.wait()
                for stream in (proc.stdin, proc.stdout, proc.stderr):
                    if stream is not None:
                        stream.close()


def test_a_tool_output_holding_one_long_text_shows_the_text() -> None:
    output = {"type": "function_call_output", "call_id": "c", "success": True,
              "output": orjson.dumps({"result": "line one\n\nline three"}).decode()}
    lines = render_record({"type": "response_item", "payload": output}, Style(False))
    assert lines == ["  <- ok: result:", "      line one", "", "      line three"]
    failed = {**output, "success": False, "output": "session x failed: boom"}
    assert render_record({"type": "response_item", "payload": failed}, Style(False)) == [
        "  <- failed: session x failed: boom"
    ]
