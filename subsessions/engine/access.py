"""Who may name which session on a wire: the one rule every remote surface resolves ids by.

`subsessions serve` and `subsessions mcp`'s `rollout://` resources take a session id from a
client they do not trust (`subsessions mcp`'s tools name children of the connection's own
session, which its manager looks up by exact id with the same answer; MCP Tasks are named
by unguessable task ids in the connection's own store). Such a client names a session
by its full canonical id only: no prefix and no path (those are a convenience of the local
CLI, whose user owns the home). It reaches what its connection created or was given, and a
session held by nobody (a rollout at rest) only by its full id, which is the capability.
Anything else, whether it exists or not, is answered `unknown session {id}`, the answer for
an id that does not exist: no answer confirms, completes or lists an id it may not see.
"""

from __future__ import annotations

import os
from collections.abc import Container
from pathlib import Path

from subsessions.engine.facade import OPEN_IN_THIS_PROCESS, Engine
from subsessions.errors import UnknownSession
from subsessions.ids import MAX_ID_LENGTH, is_session_id
from subsessions.rollouts.files import rollout_entries


def named(value: object, reachable: Container[str]) -> str:
    """The session `value` names, if it is a full id among `reachable`."""
    if isinstance(value, str) and is_session_id(value) and value in reachable:
        return value
    raise unknown(value)


def at_rest(engine: Engine, value: object) -> Path:
    """The rollout of a session no one holds open here, named by its full id.

    A session open in this engine (another connection's, or a child in anyone's tree) is
    not at rest: it is answered as unknown, not as busy.
    """
    if isinstance(value, str) and is_session_id(value) and not _open(engine, value):
        for key, path in rollout_entries(engine.home):
            if key == value and not os.path.islink(path):
                return Path(path)
    raise unknown(value)


def unknown(value: object) -> UnknownSession:
    """The one answer for an id that may not be named (`unknown session {id}`)."""
    shown = value[:MAX_ID_LENGTH] if isinstance(value, str) else type(value).__name__
    return UnknownSession(shown)


def _open(engine: Engine, session_id: str) -> bool:
    if session_id in OPEN_IN_THIS_PROCESS:  # any engine's top-level session here
        return True
    try:
        engine.resolve_session(session_id)
    except UnknownSession:
        return False
    return True
