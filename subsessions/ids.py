"""Session ids: uuid7, so rollout files sort by creation time."""

from __future__ import annotations

import re

from uuid6 import uuid7

_CANONICAL = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_PATHLIKE = re.compile(r"[/\\\x00-\x1f\x7f-\x9f]|\.\.")
MAX_ID_LENGTH = 128


def new_session_id() -> str:
    return str(uuid7())


def is_session_id(value: str) -> bool:
    """True only for the canonical lowercase form we hand out."""
    return len(value) == 36 and _CANONICAL.fullmatch(value) is not None


def id_problem(value: str) -> str | None:
    """Why a string can never be an id (hostile input), or None if it merely may not exist."""
    if len(value) > MAX_ID_LENGTH:
        return f"session_id is longer than {MAX_ID_LENGTH} characters"
    if _PATHLIKE.search(value):
        return "session_id must be a session id, not a path"
    return None
