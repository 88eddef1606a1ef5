"""The cyclic collector is paced while an engine holds many children, and left as found.

A parent of thousands of children made CPython scan its whole tree again and again (45% of
fan-out time at 100,000 children). An open engine raises the young threshold in step with
its tasks; closing puts back what it found, and a host's own setting always wins.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from subsessions import Engine, ModelRequest, Profile, ScriptedModel, SessionConfig
from subsessions._core.runtime import FLUSH_SECONDS
from subsessions._util import collector

HOST = (700, 10, 10)
WORKER = Profile(name="worker")
HELD = 2 * collector.STEP  # children in flight: two steps of the pacer


@pytest.fixture(autouse=True)
def thresholds() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(*HOST)
    yield
    gc.set_threshold(*before)


class Held:
    """Model calls that wait until the gate opens; `arrived` is set when `n` wait."""

    def __init__(self) -> None:
        self.gate, self.arrived = asyncio.Event(), asyncio.Event()
        self.waiting, self.n = 0, 0

    async def __call__(self, request: ModelRequest) -> list[str]:
        self.waiting += 1
        if self.waiting == self.n:
            self.arrived.set()
        await self.gate.wait()
        self.waiting -= 1
        return ["done"]


@asynccontextmanager
async def children_in_flight(engine: Engine, n: int = HELD) -> AsyncIterator[None]:
    """`n` more children, each blocked in its model call until the block ends."""
    held = HELDS[engine]
    held.n, gate = held.waiting + n, held.gate
    held.arrived.clear()
    held.gate = asyncio.Event()
    parent = await engine.create_session(
        SessionConfig(custom_agents=(WORKER,), max_children=n))
    ids = [await parent.subsessions.spawn_child("worker", "go") for _ in range(n)]
    await asyncio.wait_for(held.arrived.wait(), 60)
    try:
        yield
    finally:
        held.gate.set()
        held.gate = gate
        done = await parent.subsessions.wait_all(ids)
        assert {info.result for info in done.children.values()} == {"done"}


HELDS: dict[Engine, Held] = {}


async def flusher_lowers_it() -> None:
    """Until the runtime's flusher, which counts the tasks every FLUSH_SECONDS, has seen the
    children gone and put the host's threshold back (however late a loaded machine runs it:
    a fixed sleep failed there; an engine that never lowers it fails the test's bound)."""
    while gc.get_threshold() != HOST:  # noqa: ASYNC110 (the collector's setting has no event)
        await asyncio.sleep(FLUSH_SECONDS)  # one tick of the flusher


def engine(home: Path, **options: Any) -> Engine:
    held = Held()
    made = Engine(home, model_client=ScriptedModel(held, keep_requests=False), **options)
    HELDS[made] = held
    return made


async def test_children_in_flight_raise_the_young_threshold_and_close_puts_it_back(
        home: Path) -> None:
    async with engine(home) as open_engine:
        assert gc.get_threshold() == HOST  # a few tasks: nothing to pace
        async with children_in_flight(open_engine):
            raised = gc.get_threshold()
            assert raised[0] >= HELD and raised[1:] == HOST[1:]
        await flusher_lowers_it()
        assert gc.get_threshold() == HOST
        async with children_in_flight(open_engine):
            assert gc.get_threshold()[0] >= HELD
    assert gc.get_threshold() == HOST


async def test_a_host_that_sets_thresholds_itself_is_obeyed(home: Path) -> None:
    async with engine(home) as open_engine, children_in_flight(open_engine):
        gc.set_threshold(5000, 20, 20)  # the host tunes it while children run
        async with children_in_flight(open_engine):  # twice as many tasks now
            assert gc.get_threshold() == (5000, 20, 20)
    assert gc.get_threshold() == (5000, 20, 20)


async def test_an_engine_told_not_to_pace_leaves_the_collector_alone(home: Path) -> None:
    unpaced = engine(home, pace_collector=False)
    async with unpaced, children_in_flight(unpaced):
        assert gc.get_threshold() == HOST
    assert gc.get_threshold() == HOST


async def test_the_last_of_two_engines_to_close_puts_it_back(home: Path) -> None:
    first, second = engine(home / "one"), engine(home / "two")
    async with first:
        async with second, children_in_flight(second):
            assert gc.get_threshold()[0] >= HELD
        assert gc.get_threshold() == HOST  # second's tasks are gone with it
        async with children_in_flight(first):
            assert gc.get_threshold()[0] >= HELD
    assert gc.get_threshold() == HOST
