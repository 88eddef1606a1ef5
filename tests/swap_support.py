"""A separate process that keeps exchanging two names in a directory (`renameat2` with
`RENAME_EXCHANGE`, atomic: each name always exists), to race the file tools for real."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

SWAPPER = textwrap.dedent("""
    import ctypes, os, sys
    os.chdir(sys.argv[1])
    a, b = sys.argv[2].encode(), sys.argv[3].encode()
    renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    AT_FDCWD, RENAME_EXCHANGE = -100, 2
    print("ready", flush=True)
    while True:
        if renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0:
            sys.exit(f"renameat2: {os.strerror(ctypes.get_errno())}")
""")


@asynccontextmanager
async def swapping(directory: Path, a: str, b: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """`directory/a` and `directory/b` change places all the time until the block ends."""
    swapper = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SWAPPER, str(directory), a, b, stdout=subprocess.PIPE)
    try:
        assert swapper.stdout is not None
        assert await swapper.stdout.readline() == b"ready\n"
        yield swapper
        with contextlib.suppress(TimeoutError):  # it never ends by itself
            await asyncio.wait_for(swapper.wait(), 0)
        assert swapper.returncode is None, "the swapper stopped"
    finally:
        if swapper.returncode is None:
            swapper.kill()
        await swapper.wait()
