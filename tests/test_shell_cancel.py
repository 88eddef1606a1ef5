"""Cancelling many `shell` calls at once: every process is gone, each call ends once, asyncio
warns of nothing, and no thread or file descriptor is left behind (issue 19)."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from tools_support import assert_gone, live_pids, marker, needs_bwrap, wait_for_pids, ws

from subsessions import ChildStatus, Engine, SessionConfig
from subsessions.config import Invocation
from subsessions.testing import WORKER, Script, call, first_prompt, rollout_of, terminals
from subsessions.tools import ToolContext, builtin_tools
from subsessions.tools import process as process_module

__all__ = ["ws"]  # the fixture, imported so that pytest finds it here

MODES = ["danger-full-access", pytest.param("workspace-write", marks=needs_bwrap)]
MANY = 60


def open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What asyncio logged (e.g. its child watcher's "Unknown child process pid N")."""
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def in_proc(pid: int) -> bool:
    """Still in the process table: alive, or a zombie nobody reaped."""
    return Path(f"/proc/{pid}").exists()


def waitpid_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("waitpid-")]


async def shell_calls(context: ToolContext, argvs: list[list[str]]) -> list[asyncio.Task[str]]:
    (tool,) = builtin_tools(context, ["shell"])
    handler = tool.handler
    assert handler is not None
    return [
        asyncio.create_task(handler({"command": argv}, Invocation(
            session_id="s", tool_call_id=f"call_{n}", tool_name="shell")))
        for n, argv in enumerate(argvs)
    ]


@pytest.mark.parametrize("mode", MODES)
async def test_cancelling_many_shell_calls_at_once_leaves_nothing_and_warns_of_nothing(
    ws: Path, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Before the fix, the child watcher warned "Unknown child process pid N, will report
    # returncode 255" for some of these: the pid had been reaped behind its back.
    caplog.set_level(logging.DEBUG, logger="asyncio")
    fds = open_fds()
    mark = marker()
    # some blocked in a sleep, some exiting by themselves just as the cancel comes
    argvs = [["sleep", mark] if n % 2 else ["bash", "-c", f": {mark}; sleep 0.0{n % 10}"]
             for n in range(MANY)]
    tasks = await shell_calls(ToolContext(cwd=str(ws), sandbox=mode), argvs)
    pids = await wait_for_pids(mark, MANY // 2)
    for task in tasks:
        task.cancel()
    done, _ = await asyncio.wait(tasks)
    assert all(task.cancelled() or task.exception() is None for task in done)
    assert sum(task.cancelled() for task in tasks) >= MANY // 2  # the sleeps, at least
    await assert_gone(pids)
    assert live_pids(mark) == []
    assert warnings(caplog) == []
    assert waitpid_threads() == []
    assert open_fds() == fds  # pipes and pidfds all closed


async def test_a_second_cancel_while_the_process_is_reaped_still_reaps_it(
    ws: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="asyncio")
    fds = open_fds()
    mark = marker()
    (task,) = await shell_calls(ToolContext(cwd=str(ws), sandbox="danger-full-access"),
                                [["sleep", mark]])
    (pid,) = await wait_for_pids(mark, 1)
    task.cancel()
    await asyncio.sleep(0)  # the group is killed; the exit is being awaited
    task.cancel()  # interrupts that wait: the process is left to its exit watch
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(300):  # reaped by the loop when the exit comes: no zombie stays
        if not in_proc(pid):
            break
        await asyncio.sleep(0.01)
    assert not in_proc(pid)
    assert open_fds() == fds
    assert warnings(caplog) == []


async def test_without_pidfds_a_thread_per_process_waits_and_is_gone_after(
    ws: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def no_pidfd(pid: int, flags: int = 0) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(process_module.os, "pidfd_open", no_pidfd)
    fds = open_fds()
    mark = marker()
    argvs = [["sleep", mark]] * 5 + [["bash", "-c", "echo out; echo err >&2; exit 3"]]
    tasks = await shell_calls(ToolContext(cwd=str(ws), sandbox="danger-full-access"), argvs)
    await wait_for_pids(mark, 5)
    finished = await tasks[-1]
    assert '"output":"out\\nerr\\n"' in finished
    assert '"exit_code":3' in finished
    for task in tasks[:-1]:
        task.cancel()
    await asyncio.wait(tasks)
    assert all(task.cancelled() for task in tasks[:-1])
    assert live_pids(mark) == []
    for thread in waitpid_threads():
        thread.join(5)
    assert waitpid_threads() == []
    assert open_fds() == fds
    assert warnings(caplog) == []


@pytest.mark.parametrize("mode", MODES)
async def test_abort_all_children_in_shell_ends_each_once_with_every_process_gone(
    home: Path, ws: Path, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="asyncio")
    mark = marker()
    script = Script(route=first_prompt)

    def sleeper(request: Any) -> Any:
        return [call("shell", command=["sleep", mark])]

    script.handlers["sleep"] = sleeper
    config = SessionConfig(builtin_tools=("shell",), sandbox=mode, approval="never",
                           cwd=str(ws), custom_agents=(WORKER,), max_children=MANY)
    async with Engine(home, model_client=script.model) as engine:
        parent = await engine.create_session(config)
        manager = parent.subsessions
        ids = [await manager.spawn_child("worker", "sleep") for _ in range(MANY)]
        pids = await wait_for_pids(mark, MANY)
        await manager.abort_all_children()
        assert manager.running() == []
        assert {manager.status(cid) for cid in ids} == {ChildStatus.CANCELLED}
        await assert_gone(pids)
        assert live_pids(mark) == []
    for cid in ids:
        assert [t["type"] for t in terminals(rollout_of(home, cid))] == ["turn_aborted"]
    assert warnings(caplog) == []
    assert waitpid_threads() == []
