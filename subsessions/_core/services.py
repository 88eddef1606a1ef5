"""Services: what a session's children's manager and the hooks around its tasks ask of
their engine's `Runtime`. Typed here, so those modules stand above no module that imports
the runtime (`tests/test_layers.py`: the floors from a session down to it)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, Protocol, TypeVar

from subsessions._core.dispatch import Dispatcher

T = TypeVar("T")


class Services(Protocol):
    """The part of a `Runtime` the manager and the hooks use."""

    @property
    def home(self) -> Path: ...  # where rollouts (and a batch's files) go
    @property
    def dispatcher(self) -> Dispatcher[Any]: ...  # the hosts' answers and hooks

    def check_open(self) -> None: ...  # EngineClosed once closing started

    def spawn_task(self, coro: Coroutine[Any, Any, T], name: str, *,
                   while_closing: bool = False) -> asyncio.Task[T]: ...
