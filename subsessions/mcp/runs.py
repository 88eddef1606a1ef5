"""`run_sessions` on MCP: a parallel or chained run of children, every step's outcome.

With MCP Tasks a run is ONE task, not one per step: a `tools/call` answers with exactly
one `CreateTaskResult` (SEP-2663), the caller asked for one result (every step's outcome,
a chain's `{previous}` threaded through), a chain's later steps do not exist until the
earlier ones end, and `tasks/cancel` must stop the steps not started yet as well as the
running ones. The task's status message counts the steps ended so far.
"""

from __future__ import annotations

from typing import Any

import orjson

from subsessions._core.manager import SubsessionManager
from subsessions._core.session import Session
from subsessions._core.tool_calls import subsessions as subsession_tools
from subsessions._core.tool_calls.subsessions import RunPlan
from subsessions.children import WaitResult
from subsessions.errors import SubsessionError
from subsessions.mcp import catalog, run
from subsessions.profiles import Profile

NAME = catalog.RUNS


class Tracked:
    """The manager, as a run spawns through it, remembering the children the run started."""

    def __init__(self, manager: SubsessionManager) -> None:
        self._manager = manager
        self.ids: list[str] = []

    async def spawn_child(
        self, profile: str | Profile, prompt: str, *, call_id: str | None = None,
        fork_turns: int | str | None = None, output_schema: dict[str, Any] | None = None,
    ) -> str:
        child_id = await self._manager.spawn_child(
            profile, prompt, call_id=call_id, fork_turns=fork_turns,
            output_schema=output_schema)
        self.ids.append(child_id)
        return child_id

    async def wait_all(self, session_ids: list[str], timeout: float | None = None) -> WaitResult:
        return await self._manager.wait_all(session_ids, timeout)


def plan(session: Session, arguments: dict[str, Any]) -> RunPlan:
    """The checked call (the tools' errors raised); nothing has started yet."""
    return subsession_tools.parse_run(session.subsessions, arguments)


async def outcome(
    session: Session, checked: RunPlan, tracked: Tracked, call_id: str
) -> tuple[run.Outcome, Any]:
    """Run it: every step's outcome as JSON, or the error text as an error result."""
    try:
        text = await subsession_tools.run_plan(checked, tracked, call_id)
    except SubsessionError as exc:  # e.g. the engine closed under it
        return "completed", run.text_result(str(exc), error=True)
    finally:
        session.flush()  # the parent's background events reach the file
    return "completed", run.text_result(text, structured=orjson.loads(text))


def status_message(session: Session, checked: RunPlan, tracked: Tracked) -> str:
    """`1 of 3 steps ended, 4 turns, 900 tokens`."""
    infos = [session.subsessions.info(child_id) for child_id in tracked.ids]
    ended = sum(1 for i in infos if not i.status.running)
    turns = sum(i.usage.turns for i in infos)
    tokens = sum(i.usage.total_tokens for i in infos)
    return f"{ended} of {len(checked.tasks)} steps ended, {turns} turns, {tokens} tokens"
