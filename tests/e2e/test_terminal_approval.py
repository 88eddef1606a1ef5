"""`subsessions run` asks for approvals on a real terminal, without stopping the loop."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

import pytest

CODE = """
import asyncio
from subsessions.cli.run import ask_on_terminal

async def main():
    ticks = 0
    async def tick():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1
    ticker = asyncio.ensure_future(tick())
    kind = await ask_on_terminal({"kind": "shell", "command": ["rm", "x"], "reason": "why"})
    ticker.cancel()
    print("RESULT", kind, "loop-ran" if ticks > 5 else "loop-blocked", flush=True)

asyncio.run(main())
"""


@pytest.mark.parametrize(("typed", "kind"), [(b"y\n", "approved"),
                                             (b"\n", "denied-interactively-by-user")])
def test_the_question_is_answered_on_the_terminal_while_the_loop_runs(
    typed: bytes, kind: str
) -> None:
    main, child = pty.openpty()
    process = subprocess.Popen([sys.executable, "-c", CODE], stdin=child, stdout=child,
                               stderr=child, close_fds=True)
    os.close(child)
    seen = b""
    try:
        deadline = time.monotonic() + 20
        while b"RESULT" not in seen or not seen.endswith(b"\n"):
            assert time.monotonic() < deadline, seen
            ready, _, _ = select.select([main], [], [], 0.1)
            if not ready:
                continue
            try:
                seen += os.read(main, 1024)
            except OSError:
                break
            if b"[y/N]" in seen and typed:
                time.sleep(0.2)  # the loop keeps ticking while the question waits
                os.write(main, typed)
                typed = b""
    finally:
        process.wait(timeout=20)
        os.close(main)
    assert f"RESULT {kind} loop-ran".encode() in seen, seen
