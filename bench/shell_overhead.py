"""Shell overhead: the `shell` tool against `asyncio.create_subprocess_exec`, bare and sandboxed.

Each side runs `true` N times, one after another, and collects its output:

  bare        `create_subprocess_exec("true", stdout=PIPE, stderr=STDOUT)` + `communicate()`
  tool        the `shell` tool under `danger-full-access`: argument checks, approval policy,
              PATH lookup, process group, head/tail collector, group kill, JSON result
  bare bwrap  `create_subprocess_exec` of the very bubblewrap command line the tool builds
              (same namespaces, binds, status fd, seccomp filter, pids cgroup when root)
              + `communicate()`
  tool bwrap  the `shell` tool under `workspace-write`

Rounds alternate the four after a warm-up; figures are wall µs per call, min / median / max
over rounds, next to the CPU time this process spent per call (spawning, reaping, the
tool's own work; children excluded: steadier than wall time on a loaded machine), then the
median ratios: tool / bare (the tool's own cost without a sandbox), tool bwrap / bare bwrap
(the tool's cost with one), bare bwrap / bare (what the sandbox itself costs).
The workspace is a fresh temporary directory (nothing is written there). Other load is the
CPU time the machine spent outside this process and its children during the run.
gc.freeze() is not used.

Run: python bench/shell_overhead.py [--n 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from subsessions.config import Invocation
from subsessions.tools import ToolContext, builtin_tools, limits, sandbox, seccomp

Runner = Callable[[], Awaitable[None]]
SECCOMP_FD = 200  # where the bare bwrap row's filter is passed (a fresh one per call)
CALL = Invocation(session_id="bench", tool_call_id="call_bench", tool_name="shell")


def bare_runner(
    argv: list[str], pass_fds: tuple[int, ...] = (), max_processes: int | None = None
) -> Runner:
    """`argv` as is; with `max_processes`, in the pids cgroup the tool makes for it as root."""

    async def run() -> None:
        async with contextlib.AsyncExitStack() as stack:
            procs = None
            fds = pass_fds
            if max_processes is not None:  # the sandboxed row: cgroup and seccomp filter too
                procs = stack.enter_context(limits.process_cgroup(max_processes))
                rules = seccomp.filter_fd()
                if rules is not None:
                    stack.callback(os.close, rules)
                    os.dup2(rules, SECCOMP_FD)  # the number the command line names
                    stack.callback(os.close, SECCOMP_FD)
                    fds = (*pass_fds, SECCOMP_FD)
            process = await asyncio.create_subprocess_exec(
                *limits.limited(argv, procs), stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, pass_fds=fds,
            )
            await process.communicate()
        assert process.returncode == 0, argv

    return run


def tool_runner(context: ToolContext) -> Runner:
    (tool,) = builtin_tools(context, ["shell"])
    handler = tool.handler
    assert handler is not None
    arguments = {"command": ["true"]}

    async def run() -> None:
        result = await handler(arguments, CALL)
        assert '"exit_code":0' in result, result

    return run


def self_cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


async def timed(runner: Runner, n: int, cpu: list[float] | None = None) -> float:
    """Wall µs per call; appends this process's CPU µs per call (children excluded) to `cpu`."""
    started, cpu_started = time.perf_counter(), self_cpu()
    for _ in range(n):
        await runner()
    if cpu is not None:
        cpu.append((self_cpu() - cpu_started) / n * 1e6)
    return (time.perf_counter() - started) / n * 1e6


def busy_jiffies() -> int:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [int(v) for v in fields]
    return sum(values) - values[3] - values[4]  # minus idle and iowait


def own_cpu_seconds() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def row(name: str, figures: list[float]) -> str:
    return (f"{name:<12} {min(figures):>9.0f} {statistics.median(figures):>9.0f} "
            f"{max(figures):>9.0f}")


async def main(n: int, rounds: int) -> None:
    if shutil.which("bwrap") is None:
        sys.exit("bubblewrap (bwrap) is not installed; the sandboxed rows need it")
    workspace = tempfile.mkdtemp(prefix="shell-overhead-")
    sandboxed = ToolContext(cwd=workspace, sandbox="workspace-write")
    status_read, status_write = os.pipe()
    bwrap_argv = sandbox.bwrap_argv(sandboxed, ["true"], workspace, status_write,
                                    SECCOMP_FD if seccomp.program() is not None else None)
    runners: dict[str, Runner] = {
        "bare": bare_runner(["true"]),
        "tool": tool_runner(ToolContext(cwd=workspace, sandbox="danger-full-access")),
        "bare bwrap": bare_runner(bwrap_argv, (status_write,), sandboxed.max_processes),
        "tool bwrap": tool_runner(sandboxed),
    }
    # bwrap reports on the status fd at every call: keep that pipe from filling up
    asyncio.get_running_loop().add_reader(status_read, os.read, status_read, 65536)
    for runner in runners.values():  # warm-up
        await timed(runner, 20)
    figures: dict[str, list[float]] = {name: [] for name in runners}
    cpu_figures: dict[str, list[float]] = {name: [] for name in runners}
    jiffies, cpu, wall = busy_jiffies(), own_cpu_seconds(), time.perf_counter()
    for _ in range(rounds):
        for name, runner in runners.items():
            figures[name].append(await timed(runner, n, cpu_figures[name]))
    wall = time.perf_counter() - wall
    tick = os.sysconf("SC_CLK_TCK")
    other = (busy_jiffies() - jiffies) / tick - (own_cpu_seconds() - cpu)
    asyncio.get_running_loop().remove_reader(status_read)
    os.close(status_read)
    os.close(status_write)
    os.rmdir(workspace)

    print(f"shell overhead: {n} calls of `true` per side per round, {rounds} rounds, "
          f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, workspace on "
          f"{'tmpfs' if _on_tmpfs(workspace) else 'disk'}, gc.freeze not used")
    print(f"{'wall µs/call':<12} {'min':>9} {'median':>9} {'max':>9}   "
          "this process's CPU µs/call (median)")
    for name, values in figures.items():
        print(row(name, values) + f"   {statistics.median(cpu_figures[name]):>9.0f}")
    names = ("tool/bare", "tool bwrap/bare bwrap", "bare bwrap/bare", "tool bwrap/bare")
    ratios: dict[str, list[float]] = {name: [] for name in names}
    for i in range(rounds):
        f = {name: values[i] for name, values in figures.items()}
        ratios["tool/bare"].append(f["tool"] / f["bare"])
        ratios["tool bwrap/bare bwrap"].append(f["tool bwrap"] / f["bare bwrap"])
        ratios["bare bwrap/bare"].append(f["bare bwrap"] / f["bare"])
        ratios["tool bwrap/bare"].append(f["tool bwrap"] / f["bare"])
    print("median ratios (per round, min-max):")
    for name, values in ratios.items():
        print(f"  {name:<22} {statistics.median(values):5.2f}x  "
              f"({min(values):.2f}-{max(values):.2f})")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"peak RSS {peak / 1024:.1f} MiB; timed wall {wall:.1f} s; "
          f"other load {max(other, 0.0):.1f} CPU s during it")


def _on_tmpfs(path: str) -> bool:
    best, kind = "", ""
    for line in Path("/proc/mounts").read_text().splitlines():
        _, mount, fstype, *_ = line.split()
        if (path + "/").startswith(mount.rstrip("/") + "/") and len(mount) > len(best):
            best, kind = mount, fstype
    return kind == "tmpfs"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="calls per side per round")
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    asyncio.run(main(options.n, options.rounds))
