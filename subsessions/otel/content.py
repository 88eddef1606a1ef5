"""Prompts and outputs as the GenAI conventions record them (only with `capture_content`).

`gen_ai.input.messages` / `gen_ai.output.messages` are JSON strings of messages made of
parts; a conversation item in the Responses shapes maps to one message: text, a tool call
or a tool call's response. Other items (reasoning) are left out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from subsessions.items import Item, message_text

ROLES = {"developer": "system", "system": "system", "user": "user", "assistant": "assistant"}


def text_messages(role: str, text: str | None) -> str:
    """One message of plain text (a task's prompt, its answer)."""
    parts = [] if text is None else [{"type": "text", "content": text}]
    return _json([{"role": role, "parts": parts}])


def instructions(text: str) -> str:
    """`gen_ai.system_instructions`: parts, without a message around them."""
    return _json([{"type": "text", "content": text}])


def item_messages(items: Iterable[Item]) -> str:
    """A model call's input or output items as messages."""
    return _json([m for m in map(_message, items) if m is not None])


def _message(item: Item) -> dict[str, Any] | None:
    if not isinstance(item, dict):  # malformed output: the loop refuses it after the call
        return None
    kind = item.get("type")
    if kind == "message":
        return {"role": ROLES.get(str(item.get("role")), "user"),
                "parts": [{"type": "text", "content": message_text(item) or ""}]}
    if kind == "function_call":
        return {"role": "assistant", "parts": [{
            "type": "tool_call", "id": item.get("call_id"), "name": item.get("name"),
            "arguments": item.get("arguments")}]}
    if kind == "function_call_output":
        return {"role": "tool", "parts": [{
            "type": "tool_call_response", "id": item.get("call_id"),
            "response": item.get("output")}]}
    return None


def _json(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()
