"""Shared fixtures. Every test is checked for leftover tasks and writer threads."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture(autouse=True)
async def no_leftovers() -> AsyncIterator[None]:
    """Nothing the engine started may outlive a test: no task, no writer thread."""
    yield
    current = asyncio.current_task()
    left = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
    assert not left, f"tasks left behind: {left}"
    writers = [t for t in threading.enumerate() if t.name == "rollout-writer"]
    assert not writers, f"writer threads left behind: {writers}"
