"""`subsessions watch` benchmark: opening a big home, and following a live 1,000-child fan-out.

(a) First screen on a home of N = 100,000 rollouts (generated once on disk, in a fresh
    directory, by bench/list_rollouts.py's writer with small files: 60 days of trees of a
    parent, 1-12 children and some grandchildren). Rounds interleave, after a warm-up:
      names     `rollout_entries(home)`: the file names alone, the floor of any listing;
      list      `list_rollouts(home, limit=50)`: what `subsessions rollouts list` prints;
      once      the `--once` model: `Follower.open()` (the newest 50 trees read whole),
                `build_rows` and the text lines;
      screen    the live view's first screen: `WatchApp.run_test()` until it has drawn.
    Figures: min / median / max seconds, and each median against `list`'s.
(b) CPU share of one core used by the live view (Textual headless, 200x50, its 0.25 s tick)
    while another process fans out to 1,000 children on a scripted model with 1-6 s of latency
    per child, against the same view over the same home once it is still (the floor of the
    view itself); rounds alternate, each in a fresh home. Also the lag: from the fan-out's
    exit until the view shows every session ended.
Page cache warm (the files were just written); no gc.freeze().
Run: python bench/watch.py [--n 100000] [--rounds 3] [--children 1000] [--dir DIR]
     [--reuse HOME] [--skip-open] [--skip-follow]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from list_rollouts import DAY_MS, Writer, uuid7_at

from subsessions.rollouts import list_rollouts
from subsessions.rollouts.files import rollout_entries
from subsessions.watch.app import WatchApp
from subsessions.watch.cells import plain_table
from subsessions.watch.follower import Follower
from subsessions.watch.forest import build_rows

FANOUT = """
import asyncio, random, sys
from subsessions import Engine, ScriptedModel, SessionConfig
from subsessions.profiles import load_profiles

async def main(home, n):
    rng = random.Random(7)
    async def answer(request):
        await asyncio.sleep(rng.uniform(1.0, 6.0))
        return ["done: " + "x" * rng.randint(10, 200)]
    model = ScriptedModel(answer, keep_requests=False)
    async with Engine(home, model_client=model, profiles=load_profiles(None)) as engine:
        parent = await engine.create_session(SessionConfig(max_children=n + 1))
        manager = parent.subsessions
        ids = [await manager.spawn_child("mathematician", f"job {i}") for i in range(n)]
        await asyncio.gather(*(manager.wait_child(cid) for cid in ids))

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def generate(home: Path, n: int, seed: int = 1) -> None:
    """n small rollouts in trees, spread over 60 days (the writer of bench/list_rollouts.py)."""
    rng = random.Random(seed)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    writer = Writer(rng, dead.pid)
    millis = int(time.time() * 1000) - 60 * DAY_MS
    step = 60 * DAY_MS // (n // 7)
    made = 0
    while made < n:
        millis += rng.randint(1, 2 * step)
        root = uuid7_at(millis, rng)
        writer.session(home, root, millis, None, 0, rng.randint(3000, 12000))
        made += 1
        for _ in range(min(rng.randint(1, 12), n - made)):
            millis += rng.randint(1, 50)
            writer.session(home, uuid7_at(millis, rng), millis, root, 1, rng.randint(1500, 5000))
            made += 1


def once_model(home: Path) -> int:
    follower = Follower(str(home))
    follower.open()
    return len(plain_table(build_rows(follower.sessions, follower.alive), time.time()))


async def first_screen(home: Path) -> float:
    start = time.perf_counter()
    follower = Follower(str(home))
    follower.open()
    app = WatchApp(follower)
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        elapsed = time.perf_counter() - start
        await pilot.press("q")
    return elapsed


def timed(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def spread(values: list[float]) -> str:
    return (f"{min(values):7.3f} / {statistics.median(values):7.3f} / "
            f"{max(values):7.3f} s")


def opening(base: Path, n: int, rounds: int, reuse: str | None) -> None:
    if reuse is not None:  # a home an earlier run generated (reading it writes nothing new)
        home = Path(reuse)
        print(f"(a) the home of an earlier run: {home}")
    else:
        home = base / "big"
        start = time.perf_counter()
        generate(home, n)
        print(f"(a) generated {n} rollouts on disk in {time.perf_counter() - start:.0f} s: "
              f"{home}")
    runs: dict[str, Callable[[], object]] = {
        "names": lambda: rollout_entries(home),
        "list": lambda: list_rollouts(home, limit=50),
        "once": lambda: once_model(home),
        "screen": lambda: asyncio.run(first_screen(home)),
    }
    for work in runs.values():  # warm-up (the first listing also writes the index)
        work()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, work in runs.items():
            times[name].append(timed(work) if name != "screen" else asyncio.run(
                first_screen(home)))
    base_median = statistics.median(times["list"])
    for name, values in times.items():
        ratio = statistics.median(values) / base_median
        print(f"  {name:<7} {spread(values)}   {ratio:5.2f}x list")


async def watch_for(home: Path, until: Callable[[Follower], bool],
                    bound: float) -> tuple[float, float]:
    """Run the live view headless until `until(follower)`: (cpu s, wall s)."""
    follower = Follower(str(home))
    follower.open()
    app = WatchApp(follower)
    async with app.run_test(size=(200, 50)) as pilot:
        cpu, wall = time.process_time(), time.perf_counter()
        while not until(follower) and time.perf_counter() - wall < bound:
            await pilot.pause(0.05)
        used, elapsed = time.process_time() - cpu, time.perf_counter() - wall
        await pilot.press("q")
    return used, elapsed


def ended(follower: Follower, n: int) -> bool:
    statuses = [s.status(follower.alive) for s in follower.sessions.values()]
    return len(statuses) == n + 1 and "running" not in statuses  # the parent stays idle


async def following(base: Path, children: int, rounds: int) -> None:
    print(f"(b) the live view during a {children}-child fan-out (1-6 s model latency)")
    live, still, lags = [], [], []
    for at in range(rounds):
        home = base / f"fan{at}"
        home.mkdir()
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", FANOUT, str(home),
                                                    str(children))
        done: list[float] = []

        def over(follower: Follower, proc: asyncio.subprocess.Process = proc,
                 done: list[float] = done) -> bool:
            if proc.returncode is None:
                return False
            done.append(done[0] if done else time.perf_counter())
            return ended(follower, children)

        cpu, wall = await watch_for(home, over, 120.0)
        await proc.wait()
        lags.append(time.perf_counter() - done[0] if done else float("nan"))
        live.append(cpu / wall)
        cpu, wall_still = await watch_for(home, lambda follower: False, wall)
        still.append(cpu / wall_still)
        print(f"  round {at + 1}: live {live[-1]:6.1%} of a core over {wall:.1f} s, still "
              f"{still[-1]:6.1%}; caught up {lags[-1]:.2f} s after the fan-out's exit")
    print(f"  live  median {statistics.median(live):6.1%} of one core (target < 10%)")
    print(f"  still median {statistics.median(still):6.1%}; live/still "
          f"{statistics.median(live) / max(1e-9, statistics.median(still)):.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--children", type=int, default=1000)
    parser.add_argument("--dir", default=None, help="where the homes go (default: a temp dir)")
    parser.add_argument("--skip-open", action="store_true")
    parser.add_argument("--skip-follow", action="store_true")
    parser.add_argument("--reuse", metavar="HOME", help="(a) on this generated home instead")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-watch-", dir=args.dir))
    print(f"bench/watch.py: homes under {base} (left there; remove them when done)")
    if not args.skip_open:
        opening(base, args.n, args.rounds, args.reuse)
    if not args.skip_follow:
        asyncio.run(following(base, args.children, args.rounds))


if __name__ == "__main__":
    main()
