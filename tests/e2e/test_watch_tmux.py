"""`subsessions watch` on a real terminal (tmux) beside a live `subsessions run`.

The run talks to the loopback fake OpenAI server; its children's model calls are held
until the terminal shows both of them running, then released, and the same terminal
must show them (and their parent) completed. Beside a `subsessions run --control`, `c` on
its running child cancels it through the run's control socket. The tmux server is a private
one (`-L`), killed at the end whatever happens.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, Recorded, Reply, call, calls, fake_openai, text
from openai_support import TIMEOUT, cli_env, start, tool_outputs
from test_control_cli import OneStuckChild

pytest.importorskip("textual", reason="the live view needs pip install 'subsessions[watch]'")
if shutil.which("tmux") is None:
    pytest.skip("tmux is not installed (.ci/run installs it)", allow_module_level=True)

__all__ = ["fake_openai"]

WORKER = 'name = "worker"\ndescription = "does one job"\ndeveloper_instructions = "You work."\n'
BOUND = 30.0  # seconds the terminal may take to show a change under load


class Tmux:
    """A private tmux server running one command in a 200x40 window."""

    def __init__(self) -> None:
        self.socket = f"subsessions-watch-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.name = "watch"

    async def run(self, *args: str, check: bool = True) -> str:
        proc = await asyncio.create_subprocess_exec(
            "tmux", "-L", self.socket, *args, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
        if check and proc.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)}: {err.decode()}")
        return out.decode()

    async def screen(self) -> str:
        return await self.run("capture-pane", "-p", "-t", self.name)

    async def until(self, check: Callable[[str], bool], what: str) -> str:
        shown = ""
        for _ in range(int(BOUND / 0.1)):
            shown = await self.screen()
            if check(shown):
                return shown
            await asyncio.sleep(0.1)
        raise AssertionError(f"the terminal never showed {what}:\n{shown}")

    async def alive(self) -> bool:
        return "watch" in await self.run("list-sessions", "-F", "#{session_name}", check=False)


@pytest.fixture
async def tmux() -> AsyncIterator[Tmux]:
    terminal = Tmux()
    try:
        yield terminal
    finally:
        await terminal.run("kill-server", check=False)


def rows(screen: str, marker: str) -> list[str]:
    return [line for line in screen.splitlines() if marker in line]


def worker_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / "profiles").mkdir(parents=True)
    (home / "profiles" / "worker.toml").write_text(WORKER, encoding="utf-8")
    return home


def watch_command(home: Path) -> str:
    """`subsessions watch` as the tmux window runs it (its own size, this test's paths)."""
    env = [f"{k}={v}" for k, v in cli_env().items() if k in ("PYTHONPATH", "PATH")]
    return shlex.join(["env", "-u", "COLUMNS", "-u", "LINES", *env, "TERM=xterm-256color",
                       sys.executable, "-m", "subsessions", "watch", "--home", str(home)])


async def test_watch_follows_a_live_run_on_a_real_terminal(
    fake_openai: FakeOpenAI, tmp_path: Path, tmux: Tmux
) -> None:
    release = asyncio.Event()

    async def script(request: Recorded) -> Reply:
        if "You work." in json.dumps(request.body):
            await release.wait()
            return text("job done")
        done = tool_outputs(request)
        if not done:
            return calls(call("create_session", {"session_type": "worker", "prompt": "job A"}),
                         call("create_session", {"session_type": "worker", "prompt": "job B"}))
        if len(done) == 2:
            ids = [json.loads(output)["session_id"] for output in done]
            return calls(call("wait_sessions", {"session_ids": ids, "mode": "all",
                                                "timeout_ms": 60_000}))
        return text("both jobs finished")

    fake_openai.script = script
    home = worker_home(tmp_path)
    command = watch_command(home)
    await tmux.run("new-session", "-d", "-s", tmux.name, "-x", "200", "-y", "40", command)
    await tmux.until(lambda s: "SESSION" in s and ": 0 sessions" in s, "the empty home")

    run = await start("run", "--home", str(home), "--base-url", fake_openai.base_url,
                      "--model", "m-test", "do two jobs", cwd=tmp_path)
    try:
        shown = await tmux.until(
            lambda s: len([r for r in rows(s, "worker") if " running " in r]) == 2,
            "two running children")
        [parent] = rows(shown, "do two jobs")
        assert parent.split()[1:4] == ["cli", "m-test", "running"]
        assert "3 · " in parent and "(3 running)" in parent  # its subtree: itself and two
        children = rows(shown, "worker")
        assert {c.split()[-1] for c in children} == {"A", "B"}  # "job A", "job B"
        assert all(c.startswith("  ") for c in children)  # indented under the parent
        lines = shown.splitlines()
        assert lines.index(children[0]) == lines.index(parent) + 1

        release.set()
        shown = await tmux.until(
            lambda s: len([r for r in rows(s, "worker") if " completed " in r]) == 2
            and any(" completed " in r for r in rows(s, "both jobs finished")),
            "the children and the parent completed")
        assert all(r.rstrip().endswith("job done") for r in rows(shown, "worker"))
        out, err = await asyncio.wait_for(run.communicate(), TIMEOUT)
        assert run.returncode == 0, err
        assert out.decode() == "both jobs finished\n"

        await tmux.run("send-keys", "-t", tmux.name, "q")
        for _ in range(int(BOUND / 0.1)):
            if not await tmux.alive():
                break
            await asyncio.sleep(0.1)
        assert not await tmux.alive()  # q quit the watch, which ended the tmux session
    finally:
        if run.returncode is None:
            run.kill()
            await run.wait()


async def test_c_in_watch_cancels_a_running_child_of_a_live_run_with_control(
    fake_openai: FakeOpenAI, tmp_path: Path, tmux: Tmux
) -> None:
    script = OneStuckChild("You work.")
    fake_openai.script = script
    home = worker_home(tmp_path)
    command = watch_command(home)
    run = await start("run", "--control", "--home", str(home), "--base-url",
                      fake_openai.base_url, "--model", "m-test", "do one job", cwd=tmp_path)
    try:
        await tmux.run("new-session", "-d", "-s", tmux.name, "-x", "200", "-y", "40", command)
        shown = await tmux.until(
            lambda s: len([r for r in rows(s, "worker") if " running " in r]) == 1,
            "the running child")
        [parent] = rows(shown, "do one job")
        lines = shown.splitlines()
        assert lines.index(rows(shown, "worker")[0]) == lines.index(parent) + 1
        await tmux.run("send-keys", "-t", tmux.name, "Down")  # from the parent to its child
        await tmux.run("send-keys", "-t", tmux.name, "c")
        shown = await tmux.until(
            lambda s: any(" cancelled " in r for r in rows(s, "worker"))
            and any(" completed " in r for r in rows(s, "the job ended: "))
            and "|  cancelled " in s,  # the status line says what c did
            "the child cancelled, its parent completed, and the status line saying so")
        [status] = [line for line in shown.splitlines() if "|  cancelled " in line]
        assert status.startswith(f"{home}: 2 sessions, 0 running")
        out, err = await asyncio.wait_for(run.communicate(), TIMEOUT)
        assert run.returncode == 0, err
        assert out.decode().startswith("the job ended: ") and "cancelled" in out.decode()
        assert not list((home / "control").iterdir())  # the run removed its socket
        await tmux.run("send-keys", "-t", tmux.name, "q")
    finally:
        if run.returncode is None:
            run.kill()
            await run.wait()
