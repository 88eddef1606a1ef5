"""`apply_patch` against a concurrent process that swaps a directory for a symlink, and
off the event loop: a large patch does not stall other coroutines, and a cancelled patch
stops cleanly."""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from swap_support import swapping
from tools_support import ws

from subsessions.config import Invocation
from subsessions.tools import FileToolError, ToolContext, WriteNotAllowed, builtin_tools

__all__ = ["ws"]  # the fixture, imported so that pytest finds it here

CALL = Invocation(session_id="s", tool_call_id="call_9", tool_name="apply_patch")


def context(ws: Path, **kwargs: Any) -> ToolContext:
    return ToolContext(cwd=str(ws), exclude_slash_tmp=True, exclude_tmpdir_env_var=True,
                       **kwargs)


async def apply(ctx: ToolContext, patch: str) -> str:
    (tool,) = builtin_tools(ctx, ["apply_patch"])
    assert tool.handler is not None
    result: str = await tool.handler({"patch": patch}, CALL)
    return result


def everything_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


async def add_one(ws: Path, attempt: int, real: int) -> str:
    """Add `sub/f{attempt}.txt`: "Success" with the file in the real directory, or the
    start of a one-line error."""
    name = f"f{attempt}.txt"
    patch = f"*** Begin Patch\n*** Add File: sub/{name}\n+{attempt}\n*** End Patch"
    try:
        out = await apply(context(ws), patch)
    except (FileToolError, WriteNotAllowed) as exc:
        message = str(exc)
        assert "\n" not in message, message
        assert message.startswith("apply_patch"), message
        return message[:40]
    assert out == f"Success. Updated the following files:\nA sub/{name}\n"
    assert name in os.listdir(real)  # in the real directory, whatever its name now
    return "Success"


async def test_a_directory_swapped_for_a_symlink_never_redirects_a_write(
    ws: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "sub").mkdir()
    (ws / "alt").symlink_to(outside)
    real = os.open(ws / "sub", os.O_RDONLY | os.O_DIRECTORY)  # follows it under either name
    outcomes: dict[str, int] = {}
    try:
        async with swapping(ws, "sub", "alt"):  # a directory, then a symlink to the outside
            attempt = 0
            deadline = time.monotonic() + 4
            while time.monotonic() < deadline or attempt < 100:
                attempt += 1
                outcome = await add_one(ws, attempt, real)
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
                assert everything_under(outside) == [], f"written outside at attempt {attempt}"
    finally:
        os.close(real)
    assert outcomes.get("Success", 0) > 0, outcomes
    assert sum(outcomes.values()) >= 100


async def test_a_symlink_planted_while_approval_is_asked_is_refused(
    ws: Path, tmp_path: Path
) -> None:
    """The paths are checked again after the user answered, before anything is written."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "sub").mkdir()

    async def plant_then_approve(request: dict[str, Any]) -> str:
        (ws / "sub").rename(ws / "stash")
        (ws / "sub").symlink_to(outside)
        return "approved"

    ctx = context(ws, approval="untrusted", ask_permission=plant_then_approve)
    with pytest.raises(WriteNotAllowed, match=r"^apply_patch refused, no file was changed: "
                       r"writing sub/a\.txt \(.*outside/a\.txt\) is not allowed: it is outside "
                       r"the writable roots.*\(it changed while approval was asked\)$"):
        await apply(ctx, "*** Begin Patch\n*** Add File: sub/a.txt\n+x\n*** End Patch")
    assert everything_under(outside) == []


# -- off the event loop -------------------------------------------------------------------


def big_patch(count: int) -> str:
    adds = "".join(f"*** Add File: d{i % 100}/f{i}.txt\n+line {i}\n" for i in range(count))
    return f"*** Begin Patch\n{adds}*** End Patch"


async def test_a_large_patch_does_not_stall_the_event_loop(ws: Path) -> None:
    done = asyncio.Event()
    started = time.monotonic()
    ticks = [started]

    async def heartbeat() -> None:
        while not done.is_set():
            await asyncio.sleep(0.01)
            ticks.append(time.monotonic())

    beat = asyncio.create_task(heartbeat())
    try:
        out = await apply(context(ws), big_patch(20_000))
    finally:
        ticks.append(time.monotonic())
        done.set()
        await beat
    took = ticks[-1] - started
    gaps = [later - earlier for earlier, later in itertools.pairwise(ticks)]
    assert out.count("\nA ") == 20_000
    assert (ws / "d7" / "f19907.txt").read_text() == "line 19907\n"
    assert took > 1.0, f"the patch took only {took:.2f}s; it cannot show a stall"
    # before, the loop stopped for the whole patch (gap == took); a loaded machine may
    # stretch both, so the bound is relative
    assert max(gaps) < took / 4, f"max gap {max(gaps):.3f}s over {took:.2f}s"


async def test_a_cancelled_patch_stops_its_thread_and_changes_nothing(ws: Path) -> None:
    (ws / "keep.txt").write_text("before\n")
    patch = big_patch(10_000).replace(
        "*** End Patch", "*** Update File: keep.txt\n@@\n-before\n+after\n*** End Patch")
    threads = set(threading.enumerate())
    task = asyncio.create_task(apply(context(ws), patch))
    # cancel once the worker has started writing (a directory of the patch appears): the
    # file system gives no event to await here
    while not (ws / "d0").exists():  # noqa: ASYNC110
        await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # the worker has ended when the cancellation arrives: nothing was left half done
    assert (ws / "keep.txt").read_text() == "before\n"
    assert everything_under(ws) == ["keep.txt"]
    busy = [t for t in set(threading.enumerate()) - threads if _running_patch(t)]
    assert busy == []


def _running_patch(thread: threading.Thread) -> bool:
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if "apply_patch" in frame.f_code.co_filename or "patch_commit" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False
