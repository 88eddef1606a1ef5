"""Helpers for the built-in tool tests: whether bubblewrap runs here, a workspace, and a
fake `ask_permission` that records what it was asked."""

from __future__ import annotations

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
