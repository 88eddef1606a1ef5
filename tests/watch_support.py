"""Rollouts written line by line, as a session's writer would, for the tests of `watch`.

Records come from the engine's own builders (`subsessions.rollouts.records`), so a row
the watcher shows for them is what it shows for a real run; the tests decide when each
line lands, which a live engine would not let them do.
"""

from __future__ import annotations

import os
import random
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from subsessions.ids import new_session_id
from subsessions.rollouts import records
from subsessions.rollouts.recorder import rollout_path
from subsessions.rollouts.values import text

FIXTURES = Path(__file__).parent / "fixtures" / "codex"
REPO = Path(__file__).resolve().parents[1]


def stamp() -> str:
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"


class Rollout:
    """One session's file; each method appends whole lines (or, with `torn`, a part)."""

    def __init__(self, home: Path, parent: Rollout | None = None, profile: str | None = None,
                 model: str = "m-1", pid: int | None = None) -> None:
        self.id = new_session_id()
        self.path = Path(rollout_path(home, self.id, time.time()))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        spawn = None if parent is None else {"parent": parent.id, "depth": 1, "call_id": "call_1"}
        meta = records.session_meta(
            self.id, cwd="/w", source="exec", model=model, model_provider="p",
            instructions="be brief", session_type=profile, forked_from=None, spawn=spawn)
        self.pid = meta["pid"] = os.getpid() if pid is None else pid
        self.turn = "turn-1"
        self.tokens = [0, 0]
        self.add("session_meta", meta)

    def add(self, kind: str, payload: dict[str, Any]) -> None:
        self.write(orjson.dumps({"timestamp": stamp(), "type": kind, "payload": payload}) + b"\n")

    def write(self, data: bytes) -> None:
        with open(self.path, "ab") as f:
            f.write(data)

    def start(self, prompt: str) -> None:
        context = records.turn_context(self.turn, "/w", "never", {"type": "read-only"}, "m-1")
        context["pid"] = self.pid
        self.add("turn_context", context)
        self.add("event_msg", records.task_started(self.turn, time.time()))
        self.message("user", prompt)

    def message(self, role: str, said: str) -> None:
        kind = "output_text" if role == "assistant" else "input_text"
        self.add("response_item", {"type": "message", "role": role,
                                   "content": [{"type": kind, "text": said}]})

    def model_call(self, input_tokens: int, output_tokens: int) -> None:
        self.tokens = [self.tokens[0] + input_tokens, self.tokens[1] + output_tokens]
        usage = {"input_tokens": input_tokens, "output_tokens": output_tokens,
                 "total_tokens": input_tokens + output_tokens}
        total = {"input_tokens": self.tokens[0], "output_tokens": self.tokens[1],
                 "total_tokens": sum(self.tokens)}
        self.add("event_msg", records.token_count(usage, total, None))

    def tool_call(self, name: str, output: str) -> None:
        self.add("response_item", {"type": "function_call", "name": name, "arguments": "{}",
                                   "call_id": f"call_{name}"})
        self.add("response_item", {"type": "function_call_output", "call_id": f"call_{name}",
                                   "output": text(output)})

    def complete(self, answer: str) -> None:
        self.message("assistant", answer)
        for event in records.completed(self.turn, time.time(), answer):
            self.add("event_msg", event)

    def fail(self, message: str) -> None:
        for event in records.failed(self.turn, time.time(), message, None):
            self.add("event_msg", event)


def dead_pid() -> int:
    """The pid of a process that has ended: a writer that is gone."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    return dead.pid


def long_rollout(home: Path, size: int = 20 << 20) -> Rollout:
    """A completed session of `size` bytes or more, its writer gone (as after a long run):
    many turns, each a model call, a shell call with a large output and a short answer."""
    session = Rollout(home, pid=dead_pid())
    session.start("read every log")
    noise = random.Random(size)
    turn = 0
    while session.path.stat().st_size < size:
        turn += 1
        session.model_call(1000 + turn, 100 + turn % 7)
        session.tool_call("shell", f"log {turn}:\n" + noise.randbytes(150_000).hex())
        session.message("assistant", f"log {turn} read")
    session.model_call(900, 40)
    session.complete("every log read")
    return session


def once_process(home: Path) -> tuple[str, int]:
    """`subsessions watch --once` as its own process: what it printed, and its peak RSS (KiB)
    from its own rusage (wait4), so no other child of this process counts."""
    with open(home.parent / f"{home.name}.out", "w+") as out, \
            open(home.parent / f"{home.name}.err", "w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "subsessions", "watch", "--once",
                                 "--home", str(home)], stdout=out, stderr=err,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        pidfd = os.pidfd_open(proc.pid)
        try:
            ended, _, _ = select.select([pidfd], [], [], 120)
        finally:
            os.close(pidfd)
        if not ended:
            proc.kill()
            proc.wait()
            raise AssertionError("watch --once did not end within 120 s")
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        assert proc.returncode == 0, err.read()
        return out.read(), usage.ru_maxrss


def day_folder(home: Path) -> Path:
    folder = Path(rollout_path(home, "x", time.time())).parent
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def codex_home(home: Path) -> Path:
    """A home holding the rollouts the real Codex CLI 0.169 wrote (a parent, its child, ...)."""
    folder = home / "sessions" / "2026" / "11" / "23"
    folder.mkdir(parents=True)
    for fixture in FIXTURES.iterdir():
        (folder / fixture.name).write_bytes(fixture.read_bytes())
    return home
