"""Ray fan-out benchmark: N children on 2 simulated nodes against the in-process engine.

Subject: one parent spawns N children with the Ray backend (2 shards, one on each worker node
of a local `ray.cluster_utils.Cluster`, every process on 127.0.0.1), each child a full
session answered by a scripted model that travels to the shards as configuration, then
waits for every result. Baseline: the same N children in process, in the same run.
Rounds alternate baseline and subject (A B A B), each in a fresh directory, after a warm-up;
figures are per child (min / median / max) and the median ratio. Then one more Ray round
with a turn limit on the tree (each model call on a shard is granted its turn by the driver
first), against the Ray rounds without it. Then a batch (`run_batch` over N CSV items at
max_concurrency 256) in process and on Ray. Then cancel latency for
remote children held in their model call: p50 / p99 of `cancel_child` (the call returns once
the child's ending is in its rollout), against the same in process.

Run: python bench/ray_fanout.py [--n 10000] [--rounds 2] [--cancels 200] [--dir /dev/shm]

Scaling model (on paper; these machines have 2 cores, so only the overhead is measured):
for C children whose tools are CPU-bound for t seconds each on nodes of k cores,
    wall(nodes) ~= spawn + C * t / (nodes * k) + C * o / nodes_driver
where o is the per-child overhead measured here (the driver's spawn, placement, the
actor call and the result; the driver is one process, so this term does not shrink with
nodes) and spawn is the shards' start. Assumptions: tools run in the shards' processes or
their subprocesses with no shared bottleneck (the shared file system for rollouts keeps up:
about 10 small appends per child), the model is remote (its latency overlaps across
children), and children spread evenly (least-loaded placement). Speed-up is near-linear
while C * t / (nodes * k) dominates C * o, i.e. while t >> o * nodes * k.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before Ray: keep it on loopback

from subsessions import Budget, Engine, RayBackend, ScriptedModel, SessionConfig
from subsessions.models.base import ModelRequest
from subsessions.profiles import load_profiles

PROMPT = "Compute 2 + 2 and answer in one line."
BATCH_CONCURRENCY = 256
Timed = tuple[float, float]  # (wall seconds, driver CPU seconds) over the span
PROFILES = load_profiles(None)
LOOPBACK = "127.0.0.1"


def answer(request: ModelRequest) -> Any:
    return ["Answer: 4"]


async def hang(request: ModelRequest) -> Any:
    await asyncio.sleep(3600)  # held in its model call until cancelled
    return ["never"]


def start_cluster(workers: int) -> Any:
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "node_ip_address": LOOPBACK, "include_dashboard": False})
    for _ in range(workers):
        cluster.add_node(num_cpus=1, node_ip_address=LOOPBACK, resources={"shard": 1})
    ray.init(address=cluster.address, _node_ip_address=LOOPBACK, include_dashboard=False,
             log_to_driver=False, configure_logging=False)
    return cluster


def backend(shards: int) -> RayBackend:
    return RayBackend(shards=shards, actor_options={"num_cpus": 0, "resources": {"shard": 0.01}})


async def fan_out(home: Path, n: int, ray_shards: int | None, turns: bool = False) -> Timed:
    """From the first spawn to the last result (the backend already started); with `turns`,
    the tree has a turn limit (never reached) that each model call asks for."""
    chosen = backend(ray_shards) if ray_shards else None
    budget = Budget(max_turns=10 * n + 100) if turns else None
    async with Engine(home, model_client=ScriptedModel(answer), profiles=PROFILES,
                      backend=chosen) as engine:
        parent = await engine.create_session(SessionConfig(max_children=n + 10, budget=budget))
        warm = [await parent.subsessions.spawn_child("default", PROMPT) for _ in range(4)]
        await parent.subsessions.wait_all(warm)  # shards started and warm
        before = await _groups(chosen)
        start, cpu = time.perf_counter(), time.process_time()
        ids = [await parent.subsessions.spawn_child("default", PROMPT) for _ in range(n)]
        done = await parent.subsessions.wait_all(ids)
        timed = time.perf_counter() - start, time.process_time() - cpu
        assert not done.timed_out and all(c.result == "Answer: 4" for c in done.children.values())
        _say_groups(before, await _groups(chosen))
    return timed


async def batch(home: Path, n: int, ray_shards: int | None) -> Timed:
    """`run_batch` over n CSV items (written before timing) at BATCH_CONCURRENCY."""
    chosen = backend(ray_shards) if ray_shards else None
    write_input(home, n)
    async with Engine(home, model_client=ScriptedModel(answer), profiles=PROFILES,
                      backend=chosen) as engine:
        parent = await engine.create_session(SessionConfig(
            max_children=BATCH_CONCURRENCY + 10, cwd=str(home)))
        await parent.subsessions.wait_child(await parent.subsessions.spawn_child(
            "default", PROMPT))  # shards started and warm
        before = await _groups(chosen)
        start, cpu = time.perf_counter(), time.process_time()
        result = await parent.subsessions.run_batch(
            "default", "in.csv", "Compute {a} + {b} and answer in one line.", "out.jsonl",
            max_concurrency=BATCH_CONCURRENCY)
        timed = time.perf_counter() - start, time.process_time() - cpu
        assert (result.completed, result.failed) == (n, 0)
        _say_groups(before, await _groups(chosen))
    return timed


def write_input(home: Path, n: int) -> None:
    home.mkdir(parents=True)
    with open(home / "in.csv", "w") as file:
        file.write("a,b\n" + "".join(f"{i},{i + 2}\n" for i in range(n)))


async def _groups(chosen: RayBackend | None) -> list[tuple[int, int]]:
    pool = None if chosen is None else chosen.pool
    if pool is None:
        return []
    return [await s.actor.groups.remote() for s in pool.live]


def _say_groups(before: list[tuple[int, int]], after: list[tuple[int, int]]) -> None:
    if not after:
        return
    calls = sum(a[0] for a in after) - sum(b[0] for b in before)
    children = sum(a[1] for a in after) - sum(b[1] for b in before)
    print(f"  ({children} children in {calls} actor calls: {children / max(calls, 1):.1f} "
          "per call)", flush=True)


async def cancel_latency(home: Path, k: int, ray_shards: int | None) -> list[float]:
    chosen = backend(ray_shards) if ray_shards else None
    async with Engine(home, model_client=ScriptedModel(hang), profiles=PROFILES,
                      backend=chosen) as engine:
        parent = await engine.create_session(SessionConfig(max_children=k + 10))
        ids = [await parent.subsessions.spawn_child("default", PROMPT) for _ in range(k)]
        await _all_in_model_call(chosen, k)
        times = []
        for cid in ids:
            start = time.perf_counter()
            assert await parent.subsessions.cancel_child(cid)
            times.append(time.perf_counter() - start)
    return times


async def _all_in_model_call(chosen: RayBackend | None, k: int) -> None:
    if chosen is None:
        await asyncio.sleep(0.5)
        return
    while chosen.pool is None or sum(s.load for s in chosen.pool.shards) < k:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)  # each is inside its model call on its shard


def _row(name: str, per_child: list[float]) -> str:
    return (f"{name:<22} min {min(per_child):8.1f}  median {statistics.median(per_child):8.1f}"
            f"  max {max(per_child):8.1f} us/child")


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] * 1000


async def main(args: argparse.Namespace) -> None:
    base = Path(args.dir)
    run = Path(tempfile.mkdtemp(prefix="ray-fanout-", dir=base))
    local: list[float] = []
    remote: list[float] = []
    local_cpu: list[float] = []
    driver_cpu: list[float] = []
    for round_ in range(args.rounds):
        wall, cpu = await fan_out(run / f"local-{round_}", args.n, None)
        local.append(wall / args.n * 1e6)
        local_cpu.append(cpu / args.n * 1e6)
        wall, cpu = await fan_out(run / f"ray-{round_}", args.n, 2)
        remote.append(wall / args.n * 1e6)
        driver_cpu.append(cpu / args.n * 1e6)
        print(f"round {round_ + 1}: in process {local[-1]:.1f}, ray {remote[-1]:.1f} us/child "
              f"(driver CPU {driver_cpu[-1]:.1f} us/child)", flush=True)
    print(f"N = {args.n} children, {args.rounds} rounds, rollouts in {base}")
    print(_row("in process", local))
    print(_row("ray (2 nodes)", remote))
    print(_row("in process CPU", local_cpu))
    print(_row("ray driver CPU", driver_cpu))
    print(f"per-child overhead ratio (median ray / in process): "
          f"{statistics.median(remote) / statistics.median(local):.1f}x")
    target = "met" if statistics.median(driver_cpu) <= 500 else "NOT met"
    print(f"driver CPU per remote child (median): {statistics.median(driver_cpu) / 1000:.3f} ms "
          f"(target <= 0.5 ms: {target})")
    granted, granted_cpu = (x / args.n * 1e6 for x in await fan_out(
        run / "ray-turns", args.n, 2, turns=True))
    print(f"ray with a turn limit on the tree: {granted:.1f} us/child (driver CPU "
          f"{granted_cpu:.1f}); ratio against ray without one: "
          f"{granted / statistics.median(remote):.2f}x")
    for name, shards in (("in process", None), ("ray (2 nodes)", 2)):
        wall, cpu = (x / args.n * 1e6 for x in await batch(
            run / f"batch-{shards}", args.n, shards))
        print(f"batch of {args.n} at concurrency {BATCH_CONCURRENCY}, {name:<14}: "
              f"{wall:7.1f} us/item, driver CPU {cpu:7.1f} us/item", flush=True)
    local_c = await cancel_latency(run / "cancel-local", args.cancels, None)
    remote_c = await cancel_latency(run / "cancel-ray", args.cancels, 2)
    for name, values in (("in process", local_c), ("ray (2 nodes)", remote_c)):
        print(f"cancel latency {name:<14} p50 {_pct(values, 50):7.2f} ms  "
              f"p99 {_pct(values, 99):7.2f} ms  (n = {len(values)})")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"driver peak RSS {peak:.0f} MiB; gc.freeze not used")
    shutil.rmtree(run, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cancels", type=int, default=200)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    arguments = parser.parse_args()
    import ray

    cluster = start_cluster(2)
    try:
        asyncio.run(main(arguments))
    finally:
        ray.shutdown()
        cluster.shutdown()
    sys.exit(0)
