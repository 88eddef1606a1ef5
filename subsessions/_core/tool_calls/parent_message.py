"""`send_parent_message`: a child writes to the session that spawned it.

An idle top-level parent that wakes on its children (`wake_on_child_end` or
`wake_on_message`) starts a turn on the message.
"""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from subsessions._core.specs import PARENT_MESSAGE_SPEC
from subsessions.config import PARENT_MESSAGE
from subsessions.tools.schema import check_arguments


class Child(Protocol):
    async def tell_parent(self, message: str) -> str: ...  # "queued" or "started"


async def call(child: Child, arguments: dict[str, Any]) -> str:
    check_arguments(PARENT_MESSAGE, PARENT_MESSAGE_SPEC["parameters"], arguments)
    return orjson.dumps({"delivered": await child.tell_parent(arguments["message"])}).decode()
