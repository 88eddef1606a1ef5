"""Listing benchmark: 10,000 rollouts, the 50 newest and a full count, against reading line 1.

Subject: `list_rollouts(home, limit=50)` (newest first, with status, tokens and
duration, which need the tail of each file) and `len(list_rollouts(home))`.
Baseline (the least a listing can do): walk the same folders and read just the
first line of every file (`open(...).readline()`); a second baseline also
parses it with orjson, which any real listing must do.

The set is generated once in a fresh directory: top-level sessions with
children and grandchildren spread over 60 days, sizes log-normal (children
around 12 KB, parents around 60 KB, up to 1 MB), instructions of 0.3-3 KB on
line 1, and realistic endings (mostly completed; some failed, cancelled,
interrupted by a dead writer, idle, or torn). Rounds interleave the four
measurements after a warm-up; figures are min / median / max, the ratio last.
Run: python bench/list_rollouts.py [--n 10000] [--rounds 7] [--dir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from subsessions.rollouts import list_rollouts
from subsessions.rollouts.files import rollout_entries
from subsessions.rollouts.index import INDEX_NAME

DAY_MS = 86_400_000
PROFILES = ("tester", "mathematician", "linter_fixer", "default")
_LINE = orjson.OPT_APPEND_NEWLINE


BASE = "baseline: first line of every file"
NEWEST = "list_rollouts(limit=50)"
FULL = "full count: len(list_rollouts())"


def uuid7_at(millis: int, rng: random.Random) -> str:
    value = (millis << 80) | (0x7 << 76) | (rng.getrandbits(12) << 64)
    value |= (0b10 << 62) | rng.getrandbits(62)
    return str(uuid.UUID(int=value))


def stamp(millis: int) -> str:
    second, rest = divmod(millis, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)) + f".{rest:03d}Z"


class Writer:
    """Builds one rollout the way the engine lays it out, padded with tool output to a size."""

    def __init__(self, rng: random.Random, dead_pid: int) -> None:
        self.rng = rng
        self.dead_pid = dead_pid

    def session(self, home: Path, session_id: str, millis: int, parent: str | None,
                depth: int, size: int) -> None:
        rng = self.rng
        now = millis
        out = bytearray()

        def add(kind: str, payload: dict[str, Any]) -> None:
            nonlocal now
            now += rng.randint(1, 400)
            out.extend(orjson.dumps({"timestamp": stamp(now), "type": kind, "payload": payload},
                                    option=_LINE))

        profile = rng.choice(PROFILES) if parent else None
        meta: dict[str, Any] = {
            "id": session_id, "timestamp": stamp(millis)[:19] + "Z", "cwd": "/home/dev/project",
            "originator": "subsessions", "cli_version": "0.1.0",
            "source": ({"subsession": {"parent_session_id": parent, "depth": depth,
                                       "session_type": profile, "call_id": "call_1"}}
                       if parent else rng.choice(("exec", "cli"))),
            "model": "gpt-5-mini", "model_provider": "openai",
            "instructions": "You are careful. " * rng.randint(20, 180),
            "pid": self.dead_pid,
        }
        if profile:
            meta["session_type"] = profile
        add("session_meta", meta)
        ending = rng.random()
        if ending < 0.01:  # idle: never ran a task
            self._write(home, session_id, millis, out)
            return
        add("turn_context", {"cwd": "/home/dev/project", "approval_policy": "never",
                             "model": "gpt-5-mini"})
        add("event_msg", {"type": "task_started"})
        prompt = "Look at the failing test in tests/test_x.py and fix it. " * rng.randint(1, 8)
        add("response_item", {"type": "message", "role": "user",
                              "content": [{"type": "input_text", "text": prompt}]})
        add("event_msg", {"type": "user_message", "message": prompt})
        tokens = 0
        turn = 0

        def count() -> None:  # the engine counts every model response before its items
            nonlocal tokens
            used = rng.randint(500, 4000)
            tokens += used
            add("event_msg", {"type": "token_count", "info": {
                "last_token_usage": {"input_tokens": used, "output_tokens": 80,
                                     "total_tokens": used + 80},
                "total_token_usage": {"input_tokens": tokens, "output_tokens": 80 * turn,
                                      "total_tokens": tokens + 80 * turn}}})

        while len(out) < size:
            turn += 1
            count()
            call = f"call_{turn}"
            arguments = orjson.dumps({"command": ["pytest", "-q", f"tests/test_{turn}.py"]})
            add("response_item", {"type": "function_call", "name": "shell",
                                  "arguments": arguments.decode(), "call_id": call})
            output = "collected 12 items ... F.\n" * max(1, min(size - len(out), 40_000) // 26)
            add("response_item", {"type": "function_call_output", "call_id": call,
                                  "output": output, "success": True})
            if parent is None and rng.random() < 0.3:
                add("event_msg", {"type": "background_event",
                                  "message": f"child session {uuid.uuid4()} completed"})
        answer = "Fixed: the fixture now closes its file. " * rng.randint(1, 12)
        turn += 1
        count()
        add("response_item", {"type": "message", "role": "assistant",
                              "content": [{"type": "output_text", "text": answer}]})
        add("event_msg", {"type": "agent_message", "message": answer})
        if ending < 0.03:  # interrupted: the writer died before the ending
            pass
        elif ending < 0.08:
            add("event_msg", {"type": "error", "message": "model error: HTTP 500"})
        elif ending < 0.13:
            add("event_msg", {"type": "turn_aborted", "reason": "cancelled"})
        else:
            add("event_msg", {"type": "task_complete", "last_agent_message": answer})
        if 0.13 <= ending < 0.14:  # a crash mid-line after a later write began
            out.extend(b'{"timestamp":"2026-01-01T00:00:00.000Z","type":"event_msg","pay')
        self._write(home, session_id, millis, out)

    @staticmethod
    def _write(home: Path, session_id: str, millis: int, data: bytearray) -> None:
        local = time.localtime(millis / 1000)
        folder = home / "sessions" / time.strftime("%Y/%m/%d", local)
        folder.mkdir(parents=True, exist_ok=True)
        name = f"rollout-{time.strftime('%Y-%m-%dT%H-%M-%S', local)}-{session_id}.jsonl"
        (folder / name).write_bytes(data)


def generate(home: Path, n: int, seed: int) -> tuple[int, int]:
    """n rollouts: trees of a parent, 1-12 children, some grandchildren. (files, bytes)"""
    rng = random.Random(seed)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])  # a pid nobody writes with
    dead.wait()
    writer = Writer(rng, dead.pid)
    now = int(time.time() * 1000)
    millis = now - 60 * DAY_MS
    step = 60 * DAY_MS // (n // 7)  # a tree holds about 7 sessions
    made = 0
    while made < n:
        millis += rng.randint(1, 2 * step)
        root = uuid7_at(millis, rng)
        size = int(min(1 << 20, max(4000, rng.lognormvariate(11.0, 1.0))))
        writer.session(home, root, millis, None, 0, size)
        made += 1
        for _ in range(min(rng.randint(1, 12), n - made)):
            millis += rng.randint(1, 50)
            child = uuid7_at(millis, rng)
            size = int(min(400_000, max(2000, rng.lognormvariate(9.4, 1.0))))
            writer.session(home, child, millis, root, 1, size)
            made += 1
            if made < n and rng.random() < 0.15:
                millis += rng.randint(1, 50)
                size = int(min(400_000, max(2000, rng.lognormvariate(9.0, 0.8))))
                writer.session(home, uuid7_at(millis, rng), millis, child, 2, size)
                made += 1
    files = rollout_entries(home)
    return len(files), sum(os.path.getsize(p) for _, p in files)


def first_lines(home: Path) -> int:
    """Baseline: the same walk, then just the first line of every file."""
    count = 0
    for _, path in rollout_entries(home):
        with open(path, "rb") as f:
            if f.readline():
                count += 1
    return count


def first_blocks(home: Path) -> int:
    """The same with raw system calls: one os.read of 8 KB, the least an open can cost."""
    count = 0
    for _, path in rollout_entries(home):
        fd = os.open(path, os.O_RDONLY)
        try:
            if os.read(fd, 8192):
                count += 1
        finally:
            os.close(fd)
    return count


def rebuilt(home: Path) -> int:
    """A full listing with no index yet: every file read, and the index written."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(home / "sessions" / INDEX_NAME)
    return len(list_rollouts(home))


def first_lines_parsed(home: Path) -> int:
    count = 0
    for _, path in rollout_entries(home):
        with open(path, "rb") as f:
            line = f.readline()
        try:
            orjson.loads(line)
            count += 1
        except orjson.JSONDecodeError:
            pass
    return count


def _other_cpu() -> float:
    """CPU seconds used by the whole machine (all processes), from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:]
        busy = sum(int(x) for i, x in enumerate(fields[:8]) if i not in (3, 4))  # not idle/iowait
        return busy / os.sysconf("SC_CLK_TCK")
    except OSError:
        return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--dir", default=None, help="where to make the fresh directory")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the generated rollouts")
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="bench-list-rollouts-", dir=args.dir))
    started = time.perf_counter()
    files, size = generate(home, args.n, args.seed)
    print(f"generated {files} rollouts, {size / 1e6:.0f} MB (mean {size / files / 1e3:.1f} KB)"
          f" in {time.perf_counter() - started:.1f}s under {home}")
    fs = subprocess.run(["stat", "-f", "-c", "%T", str(home)], capture_output=True, text=True)
    print(f"file system: {fs.stdout.strip() or '?'}; page cache warm (files just written);"
          f" gc.freeze not used; python {sys.version.split()[0]}")

    subjects: dict[str, Callable[[], int]] = {
        BASE: lambda: first_lines(home),
        NEWEST: lambda: len(list_rollouts(home, limit=50)),
        FULL: lambda: len(list_rollouts(home)),
        "full listing, index rebuilt": lambda: rebuilt(home),
        "baseline: os.read(8 KB) of every file": lambda: first_blocks(home),
        "baseline: first line + orjson.loads": lambda: first_lines_parsed(home),
    }
    counts = {name: fn() for name, fn in subjects.items()}  # warm-up, and a sanity check
    assert counts[NEWEST] == 50, counts
    assert len(set(counts.values()) - {50}) == 1, counts
    print(f"every subject saw {counts[BASE]} rollouts")
    times: dict[str, list[float]] = {name: [] for name in subjects}
    cpu_before, own_before = _other_cpu(), _own_cpu()
    for round_ in range(args.rounds):
        names = list(subjects)
        if round_ % 2:
            names.reverse()  # A B C D, then D C B A
        for name in names:
            begin = time.perf_counter()
            subjects[name]()
            times[name].append(time.perf_counter() - begin)
    other = (_other_cpu() - cpu_before) - (_own_cpu() - own_before)
    print(f"\n{'':<42}{'min':>9}{'median':>9}{'max':>9}   ms ({args.rounds} rounds)  / base")
    base = statistics.median(times[BASE])
    for name, values in times.items():
        low, mid, high = min(values), statistics.median(values), max(values)
        print(f"{name:<42}{low * 1e3:>9.1f}{mid * 1e3:>9.1f}{high * 1e3:>9.1f}"
              f"{mid / base:>17.2f}")
    full = statistics.median(times[FULL])
    newest = statistics.median(times[NEWEST])
    print(f"\nper file: baseline {base / files * 1e6:.1f} us, full listing "
          f"{full / files * 1e6:.1f} us; the 50 newest in {newest * 1e3:.1f} ms")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:.0f} MiB; other processes used {other:.1f} CPU s during the rounds")
    if args.keep:
        print(f"kept {home}")
    else:
        shutil.rmtree(home)
    print(f"ratio full listing / first-line baseline (median): {full / base:.2f}"
          f" (target <= 1.5); the 50 newest in {newest * 1e3:.0f} ms (target < 1 s)")
    return 0


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    sys.exit(main())
