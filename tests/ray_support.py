"""A local Ray cluster for tests and benchmarks: a head and worker nodes, all on loopback."""

from __future__ import annotations

import os
import sys
from typing import Any

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
