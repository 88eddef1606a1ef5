"""`run_session` on MCP: one child run to its end, its last message as the tool result.

`budget` is accepted and validated (DESIGN 3.1: null, or `max_turns` / `max_tokens` /
`max_seconds`, each nullable) but NOT enforced yet: budgets are built in the engine
separately, and this tool will hand the value on once `spawn_child` takes it.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import mcp_types as types
import orjson

from subsessions import specs
from subsessions.errors import ChildCancelled, InvalidArguments, SubsessionError
from subsessions.handlers import subsessions as subsession_tools
from subsessions.session import Session

NAME = "run_session"
DESCRIPTION = (
    "Run one sub-session from a profile to its end and return its final message (with "
    "progress notifications while it runs). Clients that negotiate MCP Tasks get a task at "
    "once instead. `budget` is accepted but not enforced yet."
)
_LIMITS = {"max_turns": "integer", "max_tokens": "integer", "max_seconds": "number"}
Outcome = Literal["completed", "cancelled"]


def schema(profile_names: list[str]) -> dict[str, Any]:
    create = specs.create_schema(profile_names)
    budget = {
        "type": ["object", "null"],
        "description": "Limits for the child (accepted, not enforced yet); null for none.",
        "properties": {key: {"type": [kind, "null"], "minimum": 1 if kind == "integer" else 0}
                       for key, kind in _LIMITS.items()},
        "additionalProperties": False,
    }
    return {**create, "properties": {**create["properties"], "budget": budget}}


def check_budget(value: Any) -> dict[str, int | float | None] | None:
    """`budget`: null, or an object of the three nullable limits (positive numbers)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidArguments(NAME, "budget must be an object or null")
    for key, limit in value.items():
        kind = _LIMITS.get(key)
        if kind is None:
            raise InvalidArguments(NAME, f"budget has an unexpected property {key!r}; "
                                   f"expected {', '.join(_LIMITS)}")
        if limit is None:
            continue
        if isinstance(limit, bool) or not isinstance(limit, int | float) or (
                kind == "integer" and not float(limit).is_integer()):
            article = "an integer" if kind == "integer" else "a number"
            raise InvalidArguments(NAME, f"budget.{key} must be {article} or null")
        if not (math.isfinite(limit) and limit > 0):
            raise InvalidArguments(NAME, f"budget.{key} must be positive")
    return dict(value)


async def start(session: Session, arguments: dict[str, Any], call_id: str) -> str:
    """Validate the arguments and queue the child; its id. DESIGN 3.1 errors raised."""
    rest = {k: v for k, v in arguments.items() if k != "budget"}
    check_budget(arguments.get("budget"))  # accepted; not enforced yet (see module doc)
    created = await subsession_tools.call_parsed(session.subsessions, "create_session", rest,
                                                  call_id)
    child_id: str = orjson.loads(created)["session_id"]
    return child_id


def text_result(text: str, *, error: bool = False,
                structured: dict[str, Any] | None = None) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)],
                                structured_content=structured, is_error=error)


async def outcome(session: Session, child_id: str) -> tuple[Outcome, types.CallToolResult]:
    """Wait for the child: its last message, or the DESIGN 3.1 error text as an error."""
    manager = session.subsessions
    try:
        message = await manager.wait_child(child_id)
    except ChildCancelled as exc:
        return "cancelled", text_result(str(exc), error=True)
    except SubsessionError as exc:  # failed (or the engine closed under it)
        return "completed", text_result(str(exc), error=True)
    finally:
        session.recorder.flush()  # the parent's background events reach the file
    return "completed", text_result(message or "", structured={
        "session_id": child_id, "result": message})


def status_message(session: Session, child_id: str) -> str:
    """The child's state for `tasks/get`: `running, 2 turns, 340 tokens`."""
    info = session.subsessions.info(child_id)
    state = "running" if info.status.running else info.status.value
    return f"{state}, {info.usage.turns} turns, {info.usage.total_tokens} tokens"
