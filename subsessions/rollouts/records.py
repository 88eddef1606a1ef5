"""The payloads of the rollout lines a session writes, built in one place.

Sessions call these and hand the result to their recorder; the shapes are the ones the
real Codex CLI (0.169) reads back (docs/codex-rollouts.md), decided here alone.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

from subsessions._util.clock import clock
from subsessions._version import __version__

PID = os.getpid()
# A task ends in one of these ways; `cancelled_by` says who stopped a cancelled one.
CANCELLED_BY = ("parent", "host", "close")


def session_meta(
    session_id: str, *, cwd: str, source: str | dict[str, Any], model: str,
    model_provider: str, instructions: str, session_type: str | None,
    forked_from: str | None, spawn: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`spawn` (a child's): `parent`, `depth`, `call_id`; it makes the source Codex's
    sub-agent shape, with the parent also at the top level where Codex looks for it."""
    payload: dict[str, Any] = {
        "id": session_id,
        "timestamp": clock.now(),
        "cwd": cwd,
        "originator": "subsessions",
        "cli_version": __version__,
        "source": source,
        "model": model,
        "model_provider": model_provider,
        "base_instructions": {"text": instructions},
        "pid": PID,  # lets a reader tell a running session from an interrupted one
    }
    if spawn is not None:
        payload["source"] = {"subagent": {"thread_spawn": {
            "parent_thread_id": spawn["parent"], "depth": spawn["depth"],
            "agent_role": session_type, "agent_nickname": None, "agent_path": None,
        }}}
        payload["parent_thread_id"] = spawn["parent"]
        payload["subsession"] = {"call_id": spawn["call_id"]}  # Codex has no field for it
    if session_type is not None:
        payload["session_type"] = session_type
    if forked_from is not None:
        payload["forked_from_id"] = forked_from
    return payload


def turn_context(
    turn_id: str, cwd: str, approval_policy: str, sandbox_policy: dict[str, Any], model: str
) -> dict[str, Any]:
    return {
        "turn_id": turn_id,
        "cwd": cwd,
        "approval_policy": approval_policy,
        "sandbox_policy": sandbox_policy,
        "model": model,
        "summary": "auto",
        "pid": PID,  # the writer of this task (a resumed session's differs from meta's)
    }


def task_started(turn_id: str, started: float) -> dict[str, Any]:
    return {"type": "task_started", "turn_id": turn_id, "started_at": math.floor(started)}


def _timed(kind: str, turn_id: str, started: float) -> dict[str, Any]:
    now = time.time()
    return {"type": kind, "turn_id": turn_id, "started_at": math.floor(started),
            "completed_at": math.floor(now), "duration_ms": max(0, round((now - started) * 1000))}


def completed(turn_id: str, started: float, answer: str | None) -> list[dict[str, Any]]:
    return [{**_timed("task_complete", turn_id, started), "last_agent_message": answer}]


def failed(turn_id: str, started: float, message: str, answer: str | None) -> list[dict[str, Any]]:
    """Codex's failed task: an `error` event, then `task_complete` carrying the error (the
    pair is the one ending; Codex reads the second, our status readers either)."""
    return [
        {"type": "error", "message": message, "turn_id": turn_id},
        {**_timed("task_complete", turn_id, started), "last_agent_message": answer,
         "error": {"message": message, "codex_error_info": "other"}},
    ]


def cancelled(turn_id: str, started: float, by: str) -> list[dict[str, Any]]:
    """Codex has no "cancelled" reason: it is `interrupted`, told apart by `cancelled_by`."""
    return [{**_timed("turn_aborted", turn_id, started), "reason": "interrupted",
             "cancelled_by": by}]


def budget_limited(
    turn_id: str, started: float, kind: str, limit: float, message: str
) -> list[dict[str, Any]]:
    """Stopped by a budget: `turn_aborted(budget_limited)` with the limit
    reached (`kind`: turns, tokens, seconds) and our error text."""
    return [{**_timed("turn_aborted", turn_id, started), "reason": "budget_limited",
             "limit": {"kind": kind, "max": limit}, "message": message}]


def interrupted(turn_id: str, started: float) -> list[dict[str, Any]]:
    """Torn down by something other than a cancel (the engine's own failure)."""
    return [{**_timed("turn_aborted", turn_id, started), "reason": "interrupted"}]


def token_count(
    last: dict[str, int], total: dict[str, int], model: str | None
) -> dict[str, Any]:
    info: dict[str, Any] = {"last_token_usage": last, "total_token_usage": total}
    if model is not None:
        info["model"] = model  # which model these tokens were spent on (a fallback's)
    return {"type": "token_count", "info": info}


def background(message: str) -> dict[str, Any]:
    return {"type": "background_event", "message": message}


