"""Time to answer `tools/list`: `subsessions mcp` against a minimal server on the same SDK.

An MCP host (the Codex CLI 0.169) starts its server, writes `initialize`, and once answered
`notifications/initialized` and `tools/list`; its first model request goes out after a short
grace, with the tools listed by then. This measures what a host sees when all three are
written at once, before the server could read any: seconds from just before the process is
spawned to the moment the `tools/list` answer line is read from its stdout.

  baseline  the minimal lowlevel-SDK server of `bench/mcp_startup.py` (one tool, the SDK's
            `stdio_server`)
  subject   `python -m subsessions mcp --home FRESH --base-url http://127.0.0.1:9/v1`
            (a loopback model URL: no key needed, and no model request is made); its answer
            is checked to hold all 8 tools with the built-in profiles

Both are cold processes; each subject round gets a home of its own. Rounds alternate A B,
B A after one warm-up of each (the OS page cache). Figures are seconds: min / median / max
over rounds; the CPU seconds each server had used when it answered (`/proc/PID/stat`, less
disturbed by other load than the wall time); the CPU seconds other processes used during the
run (`/proc/stat`), as a noise note; then the ratio of the minima, and last the ratio of the
medians (the target: at most 1.15x).

Run: python bench/mcp_tools_list.py [--rounds 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mcp_startup import HANDSHAKE, _answer, _line, row  # the same lines, read the same way

ROOT = Path(__file__).resolve().parents[1]
MINIMAL = [sys.executable, str(ROOT / "bench" / "mcp_startup.py"), "--serve-minimal"]
TOOLS = {"create_session", "wait_session", "wait_sessions", "cancel_session", "run_session",
         "run_sessions", "list_sessions", "send_message"}


AT_ONCE = b"".join((
    _line({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": HANDSHAKE, "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"}}}),
    _line({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    _line({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}),
))


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used so far (`/proc/PID/stat`)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_start(
    command: list[str], env: dict[str, str]
) -> tuple[float, float, list[dict[str, object]]]:
    """Seconds from spawn to the `tools/list` answer, the CPU seconds the server had used by
    then (less disturbed by other load than the wall time); the tools it listed."""
    began = time.perf_counter()
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(AT_ONCE)
        proc.stdin.flush()
        result = _answer(proc.stdout, 2)["result"]
        listed = time.perf_counter() - began
        cpu = _cpu_seconds(proc.pid)
        tools = list(result["tools"])  # type: ignore[index, call-overload]
        proc.stdin.close()
        if proc.wait(timeout=60) != 0:
            raise RuntimeError(f"{command[1:4]} exited {proc.returncode}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    return listed, cpu, tools


def _check(tools: list[dict[str, object]]) -> None:
    names = {str(tool["name"]) for tool in tools}
    assert names == TOOLS, sorted(names)
    [run] = [tool for tool in tools if tool["name"] == "run_session"]
    enum = run["inputSchema"]["properties"]["session_type"]["enum"]  # type: ignore[index]
    assert {"default", "tester", "mathematician"} <= set(enum), enum


def _busy_jiffies() -> int:
    """CPU time (clock ticks) every process on the machine has used, idle excluded."""
    with open("/proc/stat", encoding="ascii") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    return sum(fields) - fields[3] - fields[4]  # minus idle and iowait


def main(rounds: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ticks = os.sysconf("SC_CLK_TCK")
    with tempfile.TemporaryDirectory(prefix="bench-mcp-tools-list-") as scratch:
        def ours(index: str) -> list[str]:
            return [sys.executable, "-m", "subsessions", "mcp", "--home",
                    str(Path(scratch) / f"home-{index}"), "--model", "m",
                    "--base-url", "http://127.0.0.1:9/v1", "--wire-api", "chat"]

        one_start(MINIMAL, env)  # warm-up: the page cache, for both
        _check(one_start(ours("warm"), env)[2])
        base: list[float] = []
        subject: list[float] = []
        cpu: dict[str, list[float]] = {"minimal": [], "subsessions": []}
        busy_before, cpu_before, wall = _busy_jiffies(), time.process_time(), time.time()
        children_before = os.times()
        for index in range(rounds):  # A B, then B A: neither always goes first
            if index % 2:
                spent, our_cpu, tools = one_start(ours(str(index)), env)
                first, base_cpu, _ = one_start(MINIMAL, env)
            else:
                first, base_cpu, _ = one_start(MINIMAL, env)
                spent, our_cpu, tools = one_start(ours(str(index)), env)
            _check(tools)
            cpu["minimal"].append(base_cpu)
            cpu["subsessions"].append(our_cpu)
            base.append(first)
            subject.append(spent)
            print(f"round {index + 1}: minimal {first:.3f}  subsessions mcp {spent:.3f} s",
                  flush=True)
        children = os.times()
        ours_cpu = (time.process_time() - cpu_before
                    + children.children_user - children_before.children_user
                    + children.children_system - children_before.children_system)
        others = (_busy_jiffies() - busy_before) / ticks - ours_cpu
        wall = time.time() - wall
    print(row("minimal mcp server", base))
    print(row("subsessions mcp", subject))
    print(f"CPU s used by the server until it answered (median): minimal "
          f"{statistics.median(cpu['minimal']):.3f}, subsessions mcp "
          f"{statistics.median(cpu['subsessions']):.3f}")
    print(f"other load: {max(others, 0.0):.1f} CPU s used by other processes in {wall:.1f} s "
          f"({os.cpu_count()} CPUs)")
    print(f"ratio of the minima (least disturbed by other load): {min(subject) / min(base):.2f}x")
    ratio = statistics.median(subject) / statistics.median(base)
    print(f"tools/list ratio (median subsessions mcp / median minimal): {ratio:.2f}x  "
          f"(target <= 1.15, rounds={rounds})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    main(parser.parse_args().rounds)
