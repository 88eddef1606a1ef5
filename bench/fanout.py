"""Fan-out benchmark: N children on a zero-latency scripted model against bare asyncio.

Subject: one parent session spawns N children with `spawn_child` (each a full session with its
own rollout file), then collects every result with `gather(wait_child(...))`.
Baselines, measured in the same run, rounds interleaved (A B C A B C ...), each round in a
fresh directory, after a warm-up:
  anchor  the anchor workload: one task per child serialising 5 transcript lines with orjson
          into its own file, results gathered (what any engine must do at the least);
  equal   one task per child building the very records a child writes (9 lines, plus the two
          lines about it in the parent's rollout), one file each.
Figures are per child, min / median / max over rounds; the median ratios last. Each size also
reports the cyclic collector's share of the subject's time (time inside `gc.callbacks`), and
the per-child cost at the largest size against the one at 10,000 (flatness).
Further phases: `gather(wait_child)` against `wait_all(ids)`; N = 1,000 with 100 ms model
latency against the anchor; RSS growth per in-flight child (each size in a fresh process,
children held at their model call); a budget on every child against none.
gc.freeze() is not used; the collector starts at Python's default thresholds, and the engine
paces it while open (subsessions/_util/collector.py); the fan-out also runs with the engine told not
to (`pace_collector=False`), and prints both.
Run: python bench/fanout.py [--sizes 1000,10000,100000] [--rounds 3] [--dir /dev/shm]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from subsessions import Budget, Engine, ScriptedModel, SessionConfig
from subsessions.profiles import load_profiles

PROMPT = "Compute 2 + 2 and answer in one line."
ANSWER = "Answer: 4"
PROFILES = load_profiles(None)
# generous: never reached, but every child counts against it and arms its clock
BUDGET = Budget(max_turns=8, max_tokens=1_000_000, max_seconds=3600.0)
USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": PROMPT}]}
REPLY = {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": ANSWER}]}
Run = Callable[[Path, int, float], Awaitable[float]]


def _record(kind: str, payload: dict[str, Any]) -> bytes:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + ".000Z"
    return orjson.dumps({"timestamp": stamp, "type": kind, "payload": payload},
                        option=orjson.OPT_APPEND_NEWLINE)


def _write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


# -- the baselines ------------------------------------------------------------------------
async def _anchor_child(folder: Path, index: int, latency: float,
                        gate: asyncio.Event | None = None) -> str:
    """The anchor workload: a transcript of five lines, a model wait, its own file."""
    head = b"".join([_record("session_meta", {"id": str(index), "cwd": str(folder)}),
                     _record("response_item", USER)])  # orjson's outputs carry spare room
    await (gate.wait() if gate is not None else asyncio.sleep(latency))
    lines = [head, _record("response_item", REPLY),
             _record("event_msg", {"type": "agent_message", "message": ANSWER}),
             _record("event_msg", {"type": "task_complete", "last_agent_message": ANSWER})]
    _write(folder / f"rollout-{index}.jsonl", b"".join(lines))
    return ANSWER


async def _equal_child(folder: Path, index: int, latency: float,
                       parent_lines: list[bytes]) -> str:
    """The records a child writes (and the two about it in its parent's rollout)."""
    parent_lines.append(_record("event_msg", {"type": "background_event",
                                              "message": f"spawned child {index}"}))
    head = b"".join([
        _record("session_meta", {"id": str(index), "cwd": str(folder), "source": "exec",
                                 "model": "scripted", "instructions": ""}),
        _record("turn_context", {"cwd": str(folder), "model": "scripted"}),
        _record("event_msg", {"type": "task_started"}),
        _record("response_item", USER),
        _record("event_msg", {"type": "user_message", "message": PROMPT}),
    ])
    await asyncio.sleep(latency)
    tail = [
        _record("event_msg", {"type": "token_count", "info": {}}),
        _record("response_item", REPLY),
        _record("event_msg", {"type": "agent_message", "message": ANSWER}),
        _record("event_msg", {"type": "task_complete", "last_agent_message": ANSWER}),
    ]
    _write(folder / f"rollout-{index}.jsonl", head + b"".join(tail))
    parent_lines.append(_record("event_msg", {"type": "background_event",
                                              "message": f"child {index} completed"}))
    return ANSWER


async def anchor(folder: Path, n: int, latency: float) -> float:
    os.makedirs(folder)
    start = time.perf_counter()
    results = await asyncio.gather(*(_anchor_child(folder, i, latency) for i in range(n)))
    elapsed = time.perf_counter() - start
    assert results == [ANSWER] * n
    return elapsed


async def equal(folder: Path, n: int, latency: float) -> float:
    os.makedirs(folder)
    parent_lines: list[bytes] = []
    start = time.perf_counter()
    results = await asyncio.gather(
        *(_equal_child(folder, i, latency, parent_lines) for i in range(n)))
    _write(folder / "rollout-parent.jsonl", b"".join(parent_lines))
    elapsed = time.perf_counter() - start
    assert results == [ANSWER] * n
    return elapsed


# -- the subject --------------------------------------------------------------------------
async def subject(folder: Path, n: int, latency: float, budget: Budget | None = None,
                  collect: str = "gather", pace: bool = True) -> float:
    model = ScriptedModel(lambda request: [ANSWER], latency=latency, keep_requests=False)
    async with Engine(folder, model_client=model, profiles=PROFILES,
                      pace_collector=pace) as engine:
        parent = await engine.create_session(SessionConfig(max_children=n + 1))
        manager = parent.subsessions
        start = time.perf_counter()
        ids = [await manager.spawn_child("mathematician", PROMPT, budget=budget)
               for _ in range(n)]
        if collect == "gather":
            results = list(await asyncio.gather(*(manager.wait_child(cid) for cid in ids)))
        else:
            done = await manager.wait_all(ids)
            results = [done.children[cid].result for cid in ids]
        elapsed = time.perf_counter() - start
    assert results == [ANSWER] * n
    return elapsed


async def subject_wait_all(folder: Path, n: int, latency: float) -> float:
    return await subject(folder, n, latency, collect="wait_all")


async def subject_unpaced(folder: Path, n: int, latency: float) -> float:
    return await subject(folder, n, latency, pace=False)


async def subject_budget(folder: Path, n: int, latency: float) -> float:
    return await subject(folder, n, latency, budget=BUDGET)


class CollectorClock:
    """Time spent inside the cyclic collector (gc.callbacks), while installed."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._started

    async def time(self, run: Awaitable[float]) -> tuple[float, float]:
        self.seconds = 0.0
        gc.callbacks.append(self)
        try:
            elapsed = await run
        finally:
            gc.callbacks.remove(self)
        return elapsed, self.seconds


# -- rounds -------------------------------------------------------------------------------
def _fmt(values: list[float], n: int) -> str:
    per = sorted(v / n * 1e6 for v in values)
    return (f"min {per[0]:8.1f}  median {statistics.median(per):8.1f}  "
            f"max {per[-1]:8.1f} µs/child")


def _cpu_of_others() -> float:
    """CPU seconds all processes have used, minus ours (a rough load figure)."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:8]]
    ours = sum(os.times()[:2])
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK") - ours


async def interleaved(base: Path, tag: str, runs: dict[str, Run], n: int, latency: float,
                      rounds: int, clock: CollectorClock) -> dict[str, list[float]]:
    """Each run once per round, the order rotating; gc time is kept under `<name> gc`."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for name in runs:
        times[f"{name} gc"] = []
    names = list(runs)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            gc.collect()  # the last run's garbage is not collected on this one's time
            folder = base / f"{tag}-{name}-{r}"
            elapsed, in_gc = await clock.time(runs[name](folder, n, latency))
            times[name].append(elapsed)
            times[f"{name} gc"].append(in_gc)
            shutil.rmtree(folder, ignore_errors=True)  # 100,000 files a run: not left behind
    return times


def _share(times: dict[str, list[float]], name: str) -> float:
    """The collector's median share of a run's time."""
    return statistics.median(
        g / t for g, t in zip(times[f"{name} gc"], times[name], strict=True))


def _ratio(times: dict[str, list[float]], over: str, under: str) -> float:
    return statistics.median(times[over]) / statistics.median(times[under])


async def fan_out(base: Path, args: argparse.Namespace, clock: CollectorClock) -> None:
    per_child: dict[int, float] = {}
    runs: dict[str, Run] = {"anchor": anchor, "equal": equal, "subject": subject,
                            "unpaced": subject_unpaced}
    for n in args.sizes:
        times = await interleaved(base, f"n{n}", runs, n, 0.0, args.rounds, clock)
        per_child[n] = statistics.median(times["subject"]) / n
        gc_share = _share(times, "subject")
        print(f"N={n}")
        print(f"  anchor (5 lines, own file, gather):   {_fmt(times['anchor'], n)}")
        print(f"  equal records (9 + 2 parent lines):   {_fmt(times['equal'], n)}")
        print(f"  subsessions (spawn_child + gather):   {_fmt(times['subject'], n)}")
        print(f"  the same, collector not paced:        {_fmt(times['unpaced'], n)}")
        print(f"  collector's share of the time: subsessions {gc_share:.0%} (not paced "
              f"{_share(times, 'unpaced'):.0%}), anchor {_share(times, 'anchor'):.0%}")
        print(f"  ratio subsessions/anchor {_ratio(times, 'subject', 'anchor'):.2f} "
              f"(target <= 2.0; not paced {_ratio(times, 'unpaced', 'anchor'):.2f}); "
              f"subsessions/equal records {_ratio(times, 'subject', 'equal'):.2f}")
    if 10_000 in per_child and max(per_child) > 10_000:
        largest = max(per_child)
        print(f"flatness: per-child cost at N={largest} / at N=10000: "
              f"{per_child[largest] / per_child[10_000]:.2f} (target <= 1.15)")


async def collecting(base: Path, args: argparse.Namespace, clock: CollectorClock) -> None:
    n = 10_000
    runs: dict[str, Run] = {"gather": subject, "wait_all": subject_wait_all}
    times = await interleaved(base, "collect", runs, n, 0.0, args.rounds, clock)
    print(f"collecting N={n} results: gather(wait_child) {_fmt(times['gather'], n)}")
    print(f"                          wait_all(ids)      {_fmt(times['wait_all'], n)}")
    print(f"  ratio gather/wait_all {_ratio(times, 'gather', 'wait_all'):.2f} (target <= 1.1)")


async def latency(base: Path, args: argparse.Namespace, clock: CollectorClock) -> None:
    n = args.latency_n
    runs: dict[str, Run] = {"anchor": anchor, "subject": subject}
    times = await interleaved(base, "latency", runs, n, 0.1, args.latency_rounds, clock)
    print(f"N={n} with 100 ms model latency: anchor median "
          f"{statistics.median(times['anchor']) * 1e3:.0f} ms, subsessions median "
          f"{statistics.median(times['subject']) * 1e3:.0f} ms, wall ratio "
          f"{_ratio(times, 'subject', 'anchor'):.2f} (target <= 1.15)")


async def budgets(base: Path, args: argparse.Namespace, clock: CollectorClock) -> None:
    n = 10_000
    runs: dict[str, Run] = {"plain": subject, "budget": subject_budget}
    times = await interleaved(base, "budget", runs, n, 0.0, args.budget_rounds, clock)
    print(f"subsessions, no budget:               {_fmt(times['plain'], n)}")
    print(f"subsessions, a budget on every child: {_fmt(times['budget'], n)}")
    print(f"  ratio budget/no budget {_ratio(times, 'budget', 'plain'):.3f} (target <= 1.05)")


# -- memory: each size in a fresh process ---------------------------------------------------
def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def held_children(folder: Path, n: int, which: str) -> float:
    """RSS growth per child while N children (or N anchor tasks) wait on their model."""
    gate, all_waiting = asyncio.Event(), asyncio.Event()
    waiting = [0]

    async def held(request: Any) -> list[str]:
        waiting[0] += 1
        if waiting[0] == n:
            all_waiting.set()
        await gate.wait()
        return [ANSWER]

    os.makedirs(folder)
    gc.collect()
    if which == "anchor":
        before = _rss()
        tasks = [asyncio.ensure_future(_anchor_child(folder, i, 0.0, gate)) for i in range(n)]
        await asyncio.sleep(0.05)
        grown = _rss() - before
        gate.set()
        await asyncio.gather(*tasks)
        return grown / n
    model = ScriptedModel(held, keep_requests=False)
    async with Engine(folder, model_client=model, profiles=PROFILES) as engine:
        parent = await engine.create_session(SessionConfig(max_children=n + 1))
        before = _rss()
        ids = [await parent.subsessions.spawn_child("mathematician", PROMPT) for _ in range(n)]
        await all_waiting.wait()  # every child at its model call
        grown = _rss() - before
        gate.set()
        await parent.subsessions.wait_all(ids)
    return grown / n


def memory(base: Path, sizes: list[int]) -> None:
    for n in sizes:
        per = {}
        for which in ("anchor", "subject"):
            out = subprocess.run(
                [sys.executable, __file__, "--memory-child", which, str(n), str(base)],
                check=True, capture_output=True, text=True).stdout
            per[which] = float(out.split()[-1])
        print(f"RSS growth per in-flight child at N={n} (a fresh process each): subsessions "
              f"{per['subject'] / 1024:.1f} KiB, anchor task {per['anchor'] / 1024:.1f} KiB "
              f"(target <= 4 KiB)")


async def run(args: argparse.Namespace) -> None:
    base = Path(tempfile.mkdtemp(prefix="fanout-", dir=args.dir))
    print(f"fanout: sizes {args.sizes}, rounds {args.rounds}, files under {base} "
          f"({'tmpfs' if str(base).startswith('/dev/shm') else 'disk'}), gc.freeze=no, "
          f"gc thresholds {gc.get_threshold()}, python {sys.version.split()[0]}")
    others_before = _cpu_of_others()
    clock = CollectorClock()
    try:
        for name, warm in (("anchor", anchor), ("equal", equal), ("subject", subject)):
            await warm(base / f"warm-{name}", 500, 0.0)
        phases = {"fanout": fan_out, "collect": collecting, "latency": latency,
                  "budget": budgets}
        for phase in args.phases:
            if phase == "memory":
                memory(base, [n for n in args.sizes if n >= 10_000] or args.sizes)
            else:
                await phases[phase](base, args, clock)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"peak RSS of this process {peak / 1024:.0f} MiB; other load during the run: "
          f"{_cpu_of_others() - others_before:.1f} CPU s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")],
                        default=[1_000, 10_000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-n", type=int, default=1_000)
    parser.add_argument("--latency-rounds", type=int, default=7)
    parser.add_argument("--budget-rounds", type=int, default=4)
    parser.add_argument("--phases", type=lambda s: s.split(","),
                        default=["fanout", "collect", "latency", "memory", "budget"],
                        help="any of fanout,collect,latency,memory,budget")
    parser.add_argument("--dir", default=None, help="where to write (default: the temp dir)")
    parser.add_argument("--memory-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        which, n, base = args.memory_child
        folder = Path(base) / f"mem-{which}-{n}-{os.getpid()}"
        print(asyncio.run(held_children(folder, int(n), which)))
        return
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
