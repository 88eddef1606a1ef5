"""A task's children as its turns see them: notices of those that ended unseen, read
before a model call, and `children_at_turn_end` when the model ends its turn."""

from __future__ import annotations

from subsessions._core.conversation import Conversation
from subsessions._core.manager import SubsessionManager
from subsessions.items import developer_message


async def children_at_turn_end(host: Conversation) -> bool:
    """`children_at_turn_end` when the model ends its turn: `wait` for its
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


def deliver_notices(host: Conversation, family: SubsessionManager) -> None:
    """One developer message for each child that ended without being waited for."""
    for info in family.take_notices():
        message = developer_message(info.notice())
        host.history.append(message)
        host.recorder.record("response_item", message)
