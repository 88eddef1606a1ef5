"""Time to answer `initialize`: `subsessions mcp` against a minimal server on the same SDK.

An MCP host starts its server and sends `initialize` at once, and may send its first model
request before a slow server has answered (the Codex CLI 0.169 did): that turn has none of
the server's tools. Both subjects are cold processes over
stdio, timed from just before the process is spawned to the moment the `initialize`
response line is read from its stdout:

  baseline  a minimal MCP server written here, on the `mcp` SDK's lowlevel `Server` (what
            `subsessions mcp` is built on) with one tool, served by the SDK's `stdio_server`
  subject   `python -m subsessions mcp --home FRESH --base-url http://127.0.0.1:9/v1`
            (a loopback model URL: no key needed, and no model request is made)

`initialize` is written before the server could read it, as real hosts do. Rounds alternate
A B, B A after one warm-up of each (the OS page cache); each round then sends `tools/list`
and checks the answer (the subject lists all 8 of its tools, then builds its engine)
before closing stdin; the median time to that answer is printed too. Figures are seconds:
min / median / max over rounds, then the ratio of the medians (the target: at most 1.15x)
and of the minima.

Run: python bench/mcp_startup.py [--rounds 10]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

MINIMAL_FLAG = "--serve-minimal"


def serve_minimal() -> None:
    """The baseline server: what the shortest lowlevel-SDK server with one tool does."""
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    async def list_tools(ctx: object, params: object) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(
            name="echo", description="Echo the text back.",
            input_schema={"type": "object", "properties": {"text": {"type": "string"}}})])

    server: Server[object] = Server("minimal", version="1", on_list_tools=list_tools)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)


if len(sys.argv) > 1 and sys.argv[1] == MINIMAL_FLAG:  # before any import the bench needs
    serve_minimal()
    raise SystemExit(0)

import argparse  # noqa: E402  (the minimal server above must not pay for these)
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HANDSHAKE = "2025-11-25"  # what the SDK's client offers, and what Codex's offers too


def _line(message: dict[str, object]) -> bytes:
    return json.dumps(message).encode() + b"\n"


INITIALIZE = _line({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": HANDSHAKE, "capabilities": {},
    "clientInfo": {"name": "bench", "version": "1"}}})
AFTER = _line({"jsonrpc": "2.0", "method": "notifications/initialized"}) + _line(
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}})


def _answer(stdout: object, wanted: int) -> dict[str, object]:
    """The next JSON-RPC response with id `wanted` on the server's stdout."""
    while True:
        line = stdout.readline()  # type: ignore[attr-defined]
        if not line:
            raise RuntimeError("the server closed stdout before answering")
        message = json.loads(line)
        if message.get("id") == wanted:
            if "error" in message:
                raise RuntimeError(f"the server answered an error: {message['error']}")
            return dict(message)


def one_start(command: list[str], env: dict[str, str]) -> tuple[float, float, list[str]]:
    """Seconds from spawn to the `initialize` answer and to the `tools/list` answer sent
    right after it; the names that gave."""
    began = time.perf_counter()
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(INITIALIZE)
        proc.stdin.flush()
        _answer(proc.stdout, 1)
        spent = time.perf_counter() - began
        proc.stdin.write(AFTER)
        proc.stdin.flush()
        tools = _answer(proc.stdout, 2)["result"]["tools"]  # type: ignore[index]
        listed = time.perf_counter() - began
        names = [tool["name"] for tool in tools]
        proc.stdin.close()
        if proc.wait(timeout=60) != 0:
            raise RuntimeError(f"{command[1:4]} exited {proc.returncode}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    return spent, listed, names


def row(name: str, values: list[float]) -> str:
    return (f"{name:<22} min {min(values):6.3f}  median {statistics.median(values):6.3f}  "
            f"max {max(values):6.3f}  s")


def main(rounds: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    minimal = [sys.executable, str(Path(__file__).resolve()), MINIMAL_FLAG]
    with tempfile.TemporaryDirectory(prefix="bench-mcp-startup-") as scratch:
        def ours(index: str) -> list[str]:
            return [sys.executable, "-m", "subsessions", "mcp", "--home",
                    str(Path(scratch) / f"home-{index}"), "--model", "m",
                    "--base-url", "http://127.0.0.1:9/v1", "--wire-api", "chat"]

        one_start(minimal, env)  # warm-up: the page cache, for both
        names = one_start(ours("warm"), env)[2]
        assert "run_session" in names and "list_sessions" in names, names
        base: list[float] = []
        subject: list[float] = []
        lists: dict[str, list[float]] = {"minimal": [], "subsessions": []}
        for index in range(rounds):  # A B, then B A: neither always goes first
            if index % 2:
                spent, listed, names = one_start(ours(str(index)), env)
                first, base_listed, _ = one_start(minimal, env)
            else:
                first, base_listed, _ = one_start(minimal, env)
                spent, listed, names = one_start(ours(str(index)), env)
            assert len(names) == 8, names
            base.append(first)
            subject.append(spent)
            lists["minimal"].append(base_listed)
            lists["subsessions"].append(listed)
            print(f"round {index + 1}: minimal {base[-1]:.3f}  subsessions mcp "
                  f"{subject[-1]:.3f} s", flush=True)
    print(row("minimal mcp server", base))
    print(row("subsessions mcp", subject))
    print("tools/list sent right after initialize, answered after (s, median): minimal "
          f"{statistics.median(lists['minimal']):.3f}, subsessions mcp "
          f"{statistics.median(lists['subsessions']):.3f} (the engine is built after it)")
    ratio = statistics.median(subject) / statistics.median(base)
    print(f"ratio (median subsessions mcp / median minimal): {ratio:.2f}x  (rounds={rounds})")
    print(f"ratio of the minima (least disturbed by other load): {min(subject) / min(base):.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    main(parser.parse_args().rounds)
