"""Batch benchmark: `run_batch` over N items at max_concurrency 256 on a zero-latency scripted
model, against `bench/fanout.py`'s fan-out (spawn_child + gather) at 10,000 in the same run.

Per item, a batch does what a fanned-out child does (a full session, its own rollout file, the
two lines in its parent's rollout) plus reading its input line, rendering its prompt, and
writing its journal line and its output line. Phases:
  cost      per-item cost of a batch of N against fan-out's per-child cost at 10,000; rounds
            interleaved (fanout, batch, fanout, batch ...), each run in a fresh directory
            (target <= 1.2);
  memory    peak RSS of a whole process running a batch of each size (a fresh process each):
            the largest size against 10,000 (target <= 1.2: memory follows the concurrency);
  progress  the same batch with rich's bar redrawn every 0.2 s (to /dev/null, forced to draw
            as on a terminal) against none (target < 2%).
Input files are written before timing. Nothing is deleted until the end (deleting many files
makes creating files slow here for minutes, BENCHMARKING.md). gc.freeze() is not used.
Run: python bench/batch.py [--sizes 10000,100000] [--rounds 3] [--dir /dev/shm]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import fanout

from subsessions import Engine, ScriptedModel, SessionConfig
from subsessions.batch import planning, runner
from subsessions.cli import batch_progress as progress

CONCURRENCY = 256
Timed = tuple[float, float]  # (wall seconds, CPU seconds of the whole process: every thread,
# the rollout writer's too; on a shared machine CPU time is the steadier figure)
PROMPT = "Compute {a} + {b} and answer in one line."


def write_input(path: Path, n: int) -> None:
    with open(path, "w") as file:
        file.write("a,b\n")
        for i in range(n):
            file.write(f"{i},{i + 1}\n")


async def fan_run(folder: Path, n: int) -> Timed:
    """bench/fanout.py's subject (spawn_child n times, then gather wait_child), timed as
    `batch_run` is."""
    model = ScriptedModel(lambda request: [fanout.ANSWER], keep_requests=False)
    async with Engine(folder, model_client=model, profiles=fanout.PROFILES) as engine:
        manager = (await engine.create_session(SessionConfig(max_children=n + 1))).subsessions
        gc.collect()
        start, cpu = time.perf_counter(), time.process_time()
        ids = [await manager.spawn_child("mathematician", fanout.PROMPT) for _ in range(n)]
        results = await asyncio.gather(*(manager.wait_child(cid) for cid in ids))
        timed = time.perf_counter() - start, time.process_time() - cpu
    assert results == [fanout.ANSWER] * n
    return timed


class TimedBar(progress.Bar):
    """rich's bar, with the CPU time spent drawing it counted."""

    spent = 0.0

    def show(self, counters: runner.Counters, final: bool = False) -> None:
        start = time.thread_time()
        super().show(counters, final)
        TimedBar.spent += time.thread_time() - start


async def batch_run(folder: Path, n: int, show: bool = False) -> Timed:
    """One batch of `n` items in a fresh home: (wall, CPU) seconds from its plan (the input
    is checked and hashed) to its end."""
    os.makedirs(folder)
    source = folder / "in.csv"
    write_input(source, n)
    model = ScriptedModel(lambda request: [fanout.ANSWER], keep_requests=False)
    async with Engine(folder / "home", model_client=model, profiles=fanout.PROFILES) as engine:
        parent = await engine.create_session(SessionConfig(max_children=CONCURRENCY + 1,
                                                           cwd=str(folder)))
        gc.collect()
        start, cpu = time.perf_counter(), time.process_time()
        batch = planning.plan(engine.home, "mathematician", source, PROMPT, folder / "out.jsonl",
                            max_concurrency=CONCURRENCY, cwd=folder)
        with contextlib.ExitStack() as stack:
            shown = None
            if show:  # rich's bar, drawn as on a terminal, into /dev/null
                sink = stack.enter_context(Path(os.devnull).open("w"))  # noqa: ASYNC230
                shown = asyncio.get_running_loop().create_task(progress.follow(
                    batch.counters, TimedBar.open(sink, n, terminal=True), 0.2))
            result = await batch.run(parent.subsessions)
            elapsed = time.perf_counter() - start, time.process_time() - cpu
            if shown is not None:
                shown.cancel()
                await asyncio.wait((shown,))
    assert result.completed == n, result
    return elapsed


def per(times: list[Timed], n: int, which: int) -> str:
    values = sorted(t[which] / n * 1e6 for t in times)
    return (f"min {values[0]:7.1f}  median {statistics.median(values):7.1f}  "
            f"max {values[-1]:7.1f} µs/item")


def ratio(over: list[Timed], n: int, under: list[Timed], m: int, which: int) -> float:
    return (statistics.median(t[which] for t in over) / n) / (
        statistics.median(t[which] for t in under) / m)


async def cost(base: Path, args: argparse.Namespace) -> None:
    for n in args.sizes:
        fan: list[Timed] = []
        times: list[Timed] = []
        for r in range(args.rounds):  # fan-out and batch alternate, each in a fresh folder
            fan.append(await fan_run(base / f"cost-fanout-{n}-{r}", 10_000))
            times.append(await batch_run(base / f"cost-batch-{n}-{r}", n))
        print(f"N={n}: batch (run_batch, concurrency {CONCURRENCY})")
        print(f"  wall  {per(times, n, 0)}; fan-out at 10,000 {per(fan, 10_000, 0)}")
        print(f"  CPU   {per(times, n, 1)}; fan-out at 10,000 {per(fan, 10_000, 1)}")
        print(f"  ratio batch per item / fan-out per child: wall "
              f"{ratio(times, n, fan, 10_000, 0):.2f}, CPU {ratio(times, n, fan, 10_000, 1):.2f}"
              " (target <= 1.2)")


def memory(base: Path, sizes: list[int]) -> None:
    peaks: dict[int, int] = {}
    for n in sorted(set([10_000, *sizes])):
        out = subprocess.run([sys.executable, __file__, "--memory-child", str(n), str(base)],
                             check=True, capture_output=True, text=True).stdout
        peaks[n] = int(out.split()[-1])
        print(f"peak RSS of a process running a batch of {n:,} items: {peaks[n] / 1024:.0f} MiB")
    largest = max(peaks)
    if largest > 10_000:
        print(f"  ratio peak RSS {largest:,} / 10,000 items: {peaks[largest] / peaks[10_000]:.2f}"
              " (target <= 1.2)")


async def shown(base: Path, args: argparse.Namespace) -> None:
    n = min(args.sizes)
    off: list[Timed] = []
    on: list[Timed] = []
    TimedBar.spent = 0.0
    for r in range(args.progress_rounds):  # off, on, on, off, off, on ...
        for show in (False, True) if r % 2 == 0 else (True, False):
            (on if show else off).append(await batch_run(base / f"progress-{show}-{r}", n,
                                                         show=show))
    print(f"progress display at N={n}: off wall {per(off, n, 0)}, CPU {per(off, n, 1)}")
    print(f"                          on  wall {per(on, n, 0)}, CPU {per(on, n, 1)}")
    print(f"  cost of the display: wall {(ratio(on, n, off, n, 0) - 1) * 100:+.1f}%, CPU "
          f"{(ratio(on, n, off, n, 1) - 1) * 100:+.1f}% (target < 2%); the bar's own drawing: "
          f"{TimedBar.spent * 1e3:.0f} ms CPU of {sum(t[1] for t in on):.1f} s "
          f"({TimedBar.spent / sum(t[1] for t in on) * 100:.2f}%)")


async def run(args: argparse.Namespace) -> None:
    base = Path(tempfile.mkdtemp(prefix="batch-bench-", dir=args.dir))
    where = "tmpfs" if str(base).startswith("/dev/shm") else "disk"
    print(f"batch: sizes {args.sizes}, rounds {args.rounds}, files under {base} ({where}), "
          f"gc.freeze=no, python {sys.version.split()[0]}")
    others = fanout._cpu_of_others()
    try:
        await fan_run(base / "warm-fanout", 500)
        await batch_run(base / "warm-batch", 500)
        for phase in args.phases:
            if phase == "memory":
                memory(base, args.sizes)
            elif phase == "cost":
                await cost(base, args)
            else:
                await shown(base, args)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of this process {peak:.0f} MiB; other load during the run: "
          f"{fanout._cpu_of_others() - others:.1f} CPU s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")],
                        default=[10_000, 100_000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--progress-rounds", type=int, default=6)
    parser.add_argument("--phases", type=lambda s: s.split(","),
                        default=["cost", "memory", "progress"],
                        help="any of cost,memory,progress")
    parser.add_argument("--dir", default=None, help="where to write (default: the temp dir)")
    parser.add_argument("--memory-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        n, base = int(args.memory_child[0]), Path(args.memory_child[1])
        asyncio.run(batch_run(base / f"mem-{n}-{os.getpid()}", n))
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        return
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
