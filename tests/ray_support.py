"""A local Ray cluster for tests and benchmarks: a head and worker nodes, all on loopback."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from scripting import Script, first_prompt

from subsessions import Engine, RayBackend

LOOPBACK = "127.0.0.1"
SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
# Shards ask for a sliver of `shard`, which only worker nodes have, and no CPU (the two
# cores are shared): both shards fit on one node, SPREAD puts them on different ones.
SHARD_OPTIONS = {"num_cpus": 0, "resources": {"shard": 0.01}}


def loopback_only() -> None:
    """Ray resolves 127.0.0.1 in an address to the machine's interface address unless told,
    before it is imported, that this is no multi-machine cluster (the variable's name says
    Windows/OSX; on Linux it switches that resolution off too)."""
    if "ray" in sys.modules and os.environ.get(SWITCH) != "0":
        raise RuntimeError(f"set {SWITCH}=0 before importing ray")
    os.environ[SWITCH] = "0"


def start_cluster(ray: Any, workers: int = 2) -> Any:
    """Start the cluster and connect this process to it."""
    loopback_only()
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "node_ip_address": LOOPBACK, "include_dashboard": False,
    })
    for _ in range(workers):
        add_worker(cluster)
    ray.init(address=cluster.address, _node_ip_address=LOOPBACK, include_dashboard=False,
             log_to_driver=False, configure_logging=False)
    return cluster


def add_worker(cluster: Any, resources: dict[str, float] | None = None) -> Any:
    """A worker node (1 CPU) with `resources` (by default the `shard` one)."""
    return cluster.add_node(num_cpus=1, node_ip_address=LOOPBACK,
                            resources=resources or {"shard": 1})


@pytest.fixture
def script() -> Script:
    return Script(route=first_prompt)


@pytest.fixture
async def engine(home: Path, script: Script, ray_cluster: Any) -> AsyncIterator[Engine]:
    """An engine whose top-level sessions' children run on two shards (the model stays in
    the driver, where the script answers)."""
    backend = RayBackend(shards=2, model_on_driver=True, actor_options=SHARD_OPTIONS)
    async with Engine(home, model_client=script.model, backend=backend) as engine:
        yield engine
