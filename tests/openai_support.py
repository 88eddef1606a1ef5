"""Helpers for the tests that run against FakeOpenAI: the `subsessions` command run as a
subprocess, what the recorded requests showed the model, and the rollouts a run left."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import orjson
from fake_openai import Recorded, Reply, text

REPO = Path(__file__).resolve().parents[1]
UNSET = "SUBSESSIONS_TEST_UNSET_KEY"
TIMEOUT = 30.0


# -- the command as a user runs it --------------------------------------------------------
def cli_env() -> dict[str, str]:
    """This environment without an API key or a home, with the repository importable."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", UNSET)}
    env.pop("SUBSESSIONS_HOME", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


def _default_sigint() -> None:  # pragma: no cover - runs in the child between fork and exec
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def start(*args: str, cwd: Path) -> asyncio.subprocess.Process:
    """`python -m subsessions ARGS` as a subprocess, its stdout and stderr piped."""
    # A child inherits an ignored SIGINT (e.g. under a shell's background job); give it back
    # the default so that Python installs its KeyboardInterrupt handler, as in a terminal.
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "subsessions", *args,
        cwd=cwd,
        env=cli_env(),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        preexec_fn=_default_sigint if ignored else None,
    )


async def run(*args: str, cwd: Path) -> tuple[int, str, str]:
    """`python -m subsessions ARGS` to its end: exit code, stdout, stderr."""
    proc = await start(*args, cwd=cwd)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


# -- what a request showed the model, in either API ---------------------------------------
def tool_outputs(request: Recorded) -> list[str]:
    """The tool results the request shows the model, in order."""
    if request.api == "responses":
        return [
            str(i["output"])
            for i in request.body["input"]
            if i.get("type") == "function_call_output"
        ]
    return [str(m["content"]) for m in request.body["messages"] if m["role"] == "tool"]


# -- what a run left on disk ----------------------------------------------------------------
def rollouts(home: Path) -> dict[str, list[dict[str, Any]]]:
    """Every rollout under `home`, by session id: its records, session_meta first."""
    found: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(home.glob("sessions/*/*/*/rollout-*.jsonl")):
        records = [orjson.loads(line) for line in path.read_bytes().splitlines() if line]
        assert records[0]["type"] == "session_meta", path
        found[records[0]["payload"]["id"]] = records
    return found


class Held:
    """A FakeOpenAI script whose every answer is `reply`, sent once `gate` is set;
    `arrived` is set by the first request."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.gate, self.arrived = asyncio.Event(), asyncio.Event()

    async def __call__(self, request: Recorded) -> Reply:
        self.arrived.set()
        await self.gate.wait()
        return self.reply


# -- a model that answers by the prompt ----------------------------------------------------
def prompt_of(request: Recorded) -> str:
    """The user prompt of a chat request (its last user message)."""
    for message in reversed(request.body.get("messages", [])):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return "".join(p.get("text", "") for p in content if isinstance(p, dict))
            return str(content)
    return ""


class ByPrompt:
    """A fake model's script by prompt: each request sets its prompt's arrival event and
    waits for the prompt's gate if one is set up; `reply` answers (here `answer to {prompt}`)."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}
        self.arrived: dict[str, asyncio.Event] = {}
        self.abandoned: dict[str, asyncio.Event] = {}

    def gate(self, prompt: str) -> asyncio.Event:
        """Requests for `prompt` are answered once the returned event is set."""
        return self.gates.setdefault(prompt, asyncio.Event())

    def arrival(self, prompt: str) -> asyncio.Event:
        """Set once a model request for `prompt` has arrived."""
        return self.arrived.setdefault(prompt, asyncio.Event())

    def abandonment(self, prompt: str) -> asyncio.Event:
        """Set once a held request for `prompt` was given up by the client (cancelled)."""
        return self.abandoned.setdefault(prompt, asyncio.Event())

    async def __call__(self, request: Recorded) -> Reply:
        prompt = prompt_of(request)
        self.arrival(prompt).set()
        gate = self.gates.get(prompt)
        if gate is not None:
            try:
                await gate.wait()
            except asyncio.CancelledError:  # the client went away mid-request
                self.abandonment(prompt).set()
                raise
        return self.reply(prompt, request)

    def reply(self, prompt: str, request: Recorded) -> Reply:
        return text(f"answer to {prompt}")
