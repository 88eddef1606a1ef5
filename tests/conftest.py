"""Shared fixtures. Every test is checked for leftover tasks and writer threads."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from ray_support import loopback_only

loopback_only()  # before any test imports Ray: it reads the switch once


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


# -- the Ray backend: one local cluster for the whole run, on loopback --------------------
BACKENDS = ["in_process", "ray"]


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """A head and two worker nodes on this machine (1 CPU each), every process on
    127.0.0.1; worker nodes carry the `shard` resource, so shards land on them only."""
    from ray_support import start_cluster

    ray = pytest.importorskip("ray", reason="pip install 'subsessions[ray]'")

    cluster = start_cluster(ray)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


# -- time bounds (pytest-timeout; 60 s each unless a test is marked) -----------------------
# A fixture shared by a module or the whole run is paid for by the first test that uses it,
# inside that test's bound: starting the Ray cluster (a head and two nodes, about 20 s on a
# loaded two-core machine), or installing a judge with npm on a cold cache (its own
# `subprocess.run(timeout=600)`). Tests that may pay for one get a bound that covers it.
RAY_SECONDS = 240
NPM_SECONDS = 720
NPM_FIXTURES = frozenset({"a2a_js", "claude", "codex", "inspector", "ts_sdk"})


def _on_ray(item: pytest.Item) -> bool:
    params = getattr(getattr(item, "callspec", None), "params", {})
    return "ray_cluster" in getattr(item, "fixturenames", ()) or params.get("backend") == "ray"


def _bound(item: pytest.Item) -> int | None:
    if set(getattr(item, "fixturenames", ())) & NPM_FIXTURES:
        return NPM_SECONDS
    if _on_ray(item):
        return RAY_SECONDS
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test marked `in_process` runs on the in-process backend only: what it looks at is
    not there on Ray (a remote child's own sessions live on its shard), or it would only
    repeat another test's Ray run (the Ray part of the suite must stay short).
    Tests that may pay for a shared Ray cluster or an npm install get a longer bound
    (unless marked with one of their own). The tests on Ray run last."""
    for item in items:
        seconds = _bound(item)
        if seconds is not None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(seconds))
    dropped = [item for item in items if item.get_closest_marker("in_process") is not None
               and getattr(item, "callspec", None) is not None
               and item.callspec.params.get("backend") == "ray"]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        gone = set(map(id, dropped))
        items[:] = [item for item in items if id(item) not in gone]
    # The Ray part runs last, in one block: the cluster its first test starts would
    # otherwise idle beside every later test (its dozen processes use about 6% of a core).
    items[:] = [item for item in items if not _on_ray(item)] + list(filter(_on_ray, items))


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Any:
    """Where children of top-level sessions run: here, or on two shards of the cluster."""
    if request.param == "in_process":
        return None
    request.getfixturevalue("ray_cluster")
    from ray_support import SHARD_OPTIONS

    from subsessions import RayBackend

    return RayBackend(shards=2, model_on_driver=True, actor_options=SHARD_OPTIONS)


# -- a real model: llama.cpp's server with SmolLM2 (tests/realmodel_support.py) ----------------
def _llama_server(*extra: str) -> Iterator[Any]:
    from realmodel_support import LlamaServer, skip_reason

    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    server = LlamaServer(*extra)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def llama_server() -> Iterator[Any]:
    """Plain chat, the model's own chat template from its GGUF."""
    yield from _llama_server()


@pytest.fixture(scope="session")
def llama_tools_server() -> Iterator[Any]:
    """The `chatml-function-calling` format: tool calls the grammar keeps well formed."""
    yield from _llama_server("--chat_format", "chatml-function-calling")
