"""apply_patch benchmark: how long a large patch takes, and how long it stalls the loop.

Subject: the `apply_patch` tool adding `--n` files (100 directories) in a fresh
workspace, while a 10 ms heartbeat runs on the same event loop. Printed: the patch's
wall time, the heartbeat's largest gap (the longest the loop was unavailable to every
other session), and their ratio. Before the patch ran in a worker thread the largest
gap was the whole patch time (ratio 1.0); a ratio well below 1 means the loop kept
serving. Run: python bench/patch_stall.py [--n 30000]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import tempfile
import time

from subsessions.config import Invocation
from subsessions.tools import ToolContext, builtin_tools


async def measure(n: int) -> tuple[float, float]:
    adds = "".join(f"*** Add File: d{i % 100}/f{i}.txt\n+line {i}\n" for i in range(n))
    with tempfile.TemporaryDirectory() as ws:
        context = ToolContext(cwd=ws, exclude_slash_tmp=True, exclude_tmpdir_env_var=True)
        (tool,) = builtin_tools(context, ["apply_patch"])
        assert tool.handler is not None
        call = Invocation(session_id="bench", tool_call_id="c", tool_name="apply_patch")
        done = asyncio.Event()
        started = time.monotonic()
        ticks = [started]

        async def heartbeat() -> None:
            while not done.is_set():
                await asyncio.sleep(0.01)
                ticks.append(time.monotonic())

        beat = asyncio.create_task(heartbeat())
        await tool.handler({"patch": f"*** Begin Patch\n{adds}*** End Patch"}, call)
        ticks.append(time.monotonic())
        done.set()
        await beat
    gaps = [later - earlier for earlier, later in itertools.pairwise(ticks)]
    return ticks[-1] - started, max(gaps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=30_000)
    n = parser.parse_args().n
    took, gap = asyncio.run(measure(n))
    print(f"apply_patch of {n} files: {took:.2f}s; largest loop gap {gap * 1000:.0f} ms; "
          f"gap/patch ratio {gap / took:.3f}")


if __name__ == "__main__":
    main()
