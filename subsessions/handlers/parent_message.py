"""`send_parent_message`: a child writes to the session that spawned it (DESIGN 3.11).

Offered to children (depth >= 1) whose allowlist admits it, at every depth: the parent reads
the text before its next model call, and an idle top-level parent that wakes on its
children (`wake_on_child_end` or `wake_on_message`) starts a turn on it.
"""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from subsessions.config import PARENT_MESSAGE as NAME
from subsessions.tools.schema import check_arguments

__all__ = ["NAME", "SPEC", "call", "heard"]

SPEC: dict[str, Any] = {
    "type": "function",
    "name": NAME,
    "description": "Send a short message to the session that started you (progress, a "
    "question, an early finding); it reads it before its next step. Your final answer "
    "still goes in your last message.",
    "parameters": {
        "type": "object",
        "properties": {"message": {"type": "string", "minLength": 1}},
        "required": ["message"],
        "additionalProperties": False,
    },
}


def heard(child_id: str, message: str) -> str:
    """The line the parent's model reads."""
    return f"[message from child session {child_id}] {message}"


class Child(Protocol):
    async def tell_parent(self, message: str) -> str: ...  # "queued" or "started"


async def call(child: Child, arguments: dict[str, Any]) -> str:
    check_arguments(NAME, SPEC["parameters"], arguments)
    return orjson.dumps({"delivered": await child.tell_parent(arguments["message"])}).decode()
