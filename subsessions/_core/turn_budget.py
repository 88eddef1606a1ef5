"""How a budget ends a task: the check after each charge, each task's own exception, its
ending record, and whether a cancel being handled is the budget's own."""

from __future__ import annotations

import asyncio
from typing import Any

from subsessions._core.conversation import Conversation
from subsessions._core.meter import Meter
from subsessions.errors import BudgetExhausted
from subsessions.rollouts import records


def fresh(stop: BudgetExhausted) -> BudgetExhausted:
    """Each task raises its own exception (a cascade shares one stop among many tasks)."""
    return BudgetExhausted(stop.kind, stop.limit)


def budget_ending(turn_id: str, started: float, stop: BudgetExhausted) -> list[dict[str, Any]]:
    return records.budget_limited(turn_id, started, stop.kind, stop.limit, str(stop))


def budget_cancelled() -> bool:
    """Whether the cancel being handled is the budget's own (one delivered, none other):
    it then ends the task as a failure; any other cancel still wins as a cancel."""
    task = asyncio.current_task()
    return task is not None and task.uncancel() == 0


def check(host: Conversation, reached: tuple[Meter, BudgetExhausted] | None) -> None:
    """A budget limit was reached: the session whose limit it is stops (with its tree),
    and this task ends here, by itself, with the same error."""
    if reached is None:
        return
    meter, error = reached
    host.claim_budget_stop(error)
    if meter is not host.meter:
        meter.stop(error)
    raise fresh(error)
