"""A task's children as its turns see them: notices of those that ended unseen, read
before a model call, and `children_at_turn_end` when the model ends its turn."""

from __future__ import annotations

from typing import Protocol

from subsessions._core.manager import SubsessionManager
from subsessions.config import SessionConfig
from subsessions.items import Item, developer_message
from subsessions.rollouts.recorder import RolloutRecorder


class Turns(Protocol):
    """What these need of the session whose task it is."""

    history: list[Item]
    @property
    def recorder(self) -> RolloutRecorder: ...
    @property
    def config(self) -> SessionConfig: ...
    @property
    def spawned(self) -> SubsessionManager | None: ...  # its children, if it ever had any
    @property
    def has_mail(self) -> bool: ...  # a message waits in its inbox


async def children_at_turn_end(host: Turns) -> bool:
    """`children_at_turn_end` (DESIGN 3.11) when the model ends its turn: `wait` for its
    running children and tell the model how they (and any that ended unseen) ended in one
    more call (True), `cancel` them (`cancelled_by: parent`), or `leave` them running."""
    policy = host.config.children_at_turn_end
    family = host.spawned
    if policy == "leave" or family is None:
        return False
    if policy == "cancel":
        if family.running():
            await family.abort_all_children()
        return False
    await family.outlast()
    return family.has_notices or host.has_mail


def deliver_notices(host: Turns, family: SubsessionManager) -> None:
    """One developer message for each child that ended without being waited for."""
    for info in family.take_notices():
        message = developer_message(info.notice())
        host.history.append(message)
        host.recorder.record("response_item", message)
