"""Asking an engine's control socket: one request per connection, bounded in time.

`engines` lists the live sockets of a home (removing the stale ones it meets), and
`owner` finds which engine runs a session, as `subsessions watch` needs before it acts.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from pathlib import Path
from typing import Any

from subsessions.engine.control import paths, rpc
from subsessions.engine.control.paths import ControlUnavailable

TIMEOUT = 10.0  # seconds one request may take (a cancel waits for the child's ending)
MAX_ANSWER = 256 * 1024 * 1024  # one answer line (a listing of 100,000 sessions is ~30 MB)
_ids = itertools.count(1)


async def request(path: Path, method: str, params: dict[str, Any] | None = None,
                  timeout: float = TIMEOUT) -> Any:
    """The result of one request; `RpcError` for the engine's error answer,
    `ControlUnavailable` when the socket cannot be reached or does not answer."""
    try:
        sock = paths.connect(path)
    except OSError as exc:
        raise ControlUnavailable(str(path), exc.strerror or str(exc)) from None
    request_id = next(_ids)
    writer: asyncio.StreamWriter | None = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_unix_connection(sock=sock, limit=MAX_ANSWER)
            writer.write(rpc.request(method, params or {}, request_id))
            await writer.drain()
            line = await reader.readline()
    except (OSError, TimeoutError, ValueError) as exc:
        raise ControlUnavailable(str(path), str(exc) or type(exc).__name__) from None
    finally:
        if writer is None:
            sock.close()
        else:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
    if not line:
        raise ControlUnavailable(str(path), "the engine closed the connection unanswered")
    return rpc.result_of(line, request_id)


def engines(home: Path) -> list[Path]:
    """The sockets of the home's live engines; stale ones (their engine died) are removed."""
    return [path for path in paths.sockets(home) if not _cleared(path)]


def _cleared(path: Path) -> bool:
    if paths.stale(path):
        paths.unlink(path)
        return True
    return False


async def owner(home: Path, session_id: str) -> Path | None:
    """The socket of the engine running `session_id`, None if no engine with a socket does."""
    for path in engines(home):
        try:
            listing = await request(path, "sessions.list")
        except (ControlUnavailable, rpc.RpcError):
            continue  # it ended meanwhile, or is not answering: not the one to ask
        listed = listing.get("sessions") if isinstance(listing, dict) else None
        if isinstance(listed, list) and any(
                isinstance(s, dict) and s.get("sessionId") == session_id for s in listed):
            return path
    return None
