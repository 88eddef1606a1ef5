"""The payloads of the rollout lines a session writes, built in one place.

Sessions call these and hand the result to their recorder; the shapes (Codex's
`session_meta`, `turn_context`, `event_msg` kinds) are decided here alone.
"""

from __future__ import annotations

import os
from typing import Any

from subsessions._version import __version__
from subsessions.clock import clock

PID = os.getpid()
CANCELLED: dict[str, Any] = {"type": "turn_aborted", "reason": "cancelled"}
INTERRUPTED: dict[str, Any] = {"type": "turn_aborted", "reason": "interrupted"}


def session_meta(
    session_id: str, *, cwd: str, source: str | dict[str, Any], model: str,
    model_provider: str, instructions: str, session_type: str | None,
    forked_from: str | None,
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "id": session_id,
        "timestamp": clock.now(),
        "cwd": cwd,
        "originator": "subsessions",
        "cli_version": __version__,
        "source": source,
        "model": model,
        "model_provider": model_provider,
        "instructions": instructions,
        "pid": PID,  # lets a reader tell a running session from an interrupted one
    }
    if session_type is not None:
        payload["session_type"] = session_type
    if forked_from is not None:
        payload["forked_from_id"] = forked_from
    return payload


def turn_context(cwd: str, approval_policy: str, model: str) -> dict[str, Any]:
    return {
        "cwd": cwd,
        "approval_policy": approval_policy,
        "model": model,
        "pid": PID,  # the writer of this task (a resumed session's differs from meta's)
    }


def task_complete(answer: str | None) -> dict[str, Any]:
    return {"type": "task_complete", "last_agent_message": answer}


def task_error(message: str) -> dict[str, Any]:
    return {"type": "error", "message": message}


def token_count(
    last: dict[str, int], total: dict[str, int], model: str | None
) -> dict[str, Any]:
    info: dict[str, Any] = {"last_token_usage": last, "total_token_usage": total}
    if model is not None:
        info["model"] = model  # which model these tokens were spent on (a fallback's)
    return {"type": "token_count", "info": info}


def background(message: str) -> dict[str, Any]:
    return {"type": "background_event", "message": message}


def budget_limited(kind: str, limit: float, message: str) -> dict[str, Any]:
    """A task stopped by a budget (DESIGN 3.5): Codex's `turn_aborted`, with the limit."""
    return {"type": "turn_aborted", "reason": "budget_limited",
            "limit": {"kind": kind, "max": limit}, "message": message}


def is_budget_limited(terminal: dict[str, Any]) -> bool:
    return terminal.get("reason") == "budget_limited"
