"""What `c` and `m` do in `subsessions watch`: find the engine that runs the selected
session (its control socket under `home/control/`) and ask it; each returns the line the
status bar shows. No Textual here: the live view awaits these in its workers.
"""

from __future__ import annotations

from pathlib import Path

from subsessions.engine.control.client import owner, request
from subsessions.engine.control.paths import ControlUnavailable
from subsessions.engine.control.rpc import RpcError

NO_SOCKET = ("{what}: no engine with a control socket runs {short} (start it with "
             "`subsessions run --control` or `batch --control`)")


async def engine_of(home: str, session_id: str) -> Path | None:
    """The socket of the engine running the session, or None."""
    return await owner(Path(home), session_id)


async def cancel(home: str, session_id: str, short: str) -> str:
    path = await engine_of(home, session_id)
    if path is None:
        return NO_SOCKET.format(what="cancel", short=short)
    return await _ask(path, "cancel", "sessions.cancel", {"sessionId": session_id}, short)


async def send(path: Path, session_id: str, message: str, short: str) -> str:
    params = {"sessionId": session_id, "message": message}
    return await _ask(path, "message", "sessions.send", params, short)


async def _ask(path: Path, what: str, method: str, params: dict[str, str], short: str) -> str:
    try:
        result = await request(path, method, params)
    except RpcError as exc:
        return f"{what} {short}: {exc.message}"
    except ControlUnavailable as exc:
        return f"{what} {short}: the engine did not answer ({exc.problem})"
    if method == "sessions.cancel":
        cancelled = isinstance(result, dict) and result.get("cancelled") is True
        return f"cancelled {short}" if cancelled else f"{short} was not running: nothing to cancel"
    delivered = result.get("delivered") if isinstance(result, dict) else None
    if delivered == "queued":
        return f"message queued for {short}: it reads it before its next model call"
    return f"message sent to {short}: a follow-up task started"
