"""Helpers for the built-in tool tests: whether bubblewrap runs here, a workspace, and a
fake `ask_permission` that records what it was asked."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

BWRAP_WORKS = shutil.which("bwrap") is not None and subprocess.run(
    ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid",
     "--unshare-net", "true"], capture_output=True,
).returncode == 0
needs_bwrap = pytest.mark.skipif(not BWRAP_WORKS, reason="bubblewrap cannot run here")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


class Recorder:
    """A fake `ask_permission`: records each request and answers `answer` (or raises it)."""

    def __init__(self, answer: Any = "approved") -> None:
        self.answer = answer
        self.requests: list[dict[str, Any]] = []

    async def __call__(self, request: dict[str, Any]) -> Any:
        self.requests.append(request)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


# -- processes, found by a marker in their command line -----------------------------------
def marker() -> str:
    """A sleep duration no other process uses: its processes can be found by command line."""
    return f"{random.randint(5000, 9999)}.{random.randint(10**5, 10**6 - 1)}"


def live_pids(mark: str) -> list[int]:
    """Processes (not zombies) whose command line contains `mark`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if mark.encode() in cmdline and state not in ("Z", "X"):
            found.append(int(entry))
    return found


async def wait_for_pids(mark: str, count: int) -> list[int]:
    for _ in range(500):
        pids = live_pids(mark)
        if len(pids) >= count:
            return pids
        await asyncio.sleep(0.01)
    raise AssertionError(f"expected {count} processes with {mark}, found {live_pids(mark)}")


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


async def assert_gone(pids: list[int]) -> None:
    """Each pid is dead (a zombie waiting for its reaper counts as dead).

    Within 10 s: a sandbox's namespace init (the inner bwrap) exits only after the kernel
    has torn its namespace down, which a loaded machine can take seconds to do."""
    for _ in range(1000):
        alive = [pid for pid in pids if _alive(pid)]
        if not alive:
            return
        await asyncio.sleep(0.01)
    shown = {pid: _described(pid) for pid in alive}
    raise AssertionError(f"still alive: {shown}")


def _described(pid: int) -> str:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return "gone"
    wanted = ("State:", "PPid:", "NSpid:")
    return f"{cmdline.decode(errors='replace')[:200]} " + " ".join(
        line.split(None, 1)[1] for line in status if line.startswith(wanted))
