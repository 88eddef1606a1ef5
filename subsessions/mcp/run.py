"""`run_session` on MCP: one child run to its end, its last message as the tool result.

`budget` (null or omitted, or `max_turns` / `max_tokens` / `max_seconds`, each
nullable) is the child's, enforced as `create_session`'s.
"""

from __future__ import annotations

from typing import Any, Literal

import mcp_types as types

from subsessions._core.session import Session
from subsessions._core.tool_calls import subsessions as subsession_tools
from subsessions.errors import ChildCancelled, SubsessionError
from subsessions.mcp import catalog

NAME = catalog.RUN
Outcome = Literal["completed", "cancelled"]


async def start(session: Session, arguments: dict[str, Any], call_id: str) -> str:
    """Validate the arguments and queue the child; its id; the tools' errors raised."""
    return await subsession_tools.create(session.subsessions, arguments, call_id, NAME)


def text_result(text: str, *, error: bool = False,
                structured: dict[str, Any] | None = None) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)],
                                structured_content=structured, is_error=error)


async def outcome(session: Session, child_id: str) -> tuple[Outcome, types.CallToolResult]:
    """Wait for the child: its last message, or the tools' error text as an error."""
    manager = session.subsessions
    try:
        message = await manager.wait_child(child_id)
    except ChildCancelled as exc:
        return "cancelled", text_result(str(exc), error=True)
    except SubsessionError as exc:  # failed (or the engine closed under it)
        return "completed", text_result(str(exc), error=True)
    finally:
        session.flush()  # the parent's background events reach the file
    return "completed", text_result(message or "", structured={
        "session_id": child_id, "result": message})


def status_message(session: Session, child_id: str) -> str:
    """The child's state for `tasks/get`: `running, 2 turns, 340 tokens`."""
    info = session.subsessions.info(child_id)
    return f"{info.status.word}, {info.usage.turns} turns, {info.usage.total_tokens} tokens"
