"""Conversation items in the OpenAI Responses shapes.

Items are plain dicts on purpose: they are the public request contract of
`ModelRequest.items`, they are written to rollouts as they are (orjson
serialises dicts natively, with no conversion step on the hot path), and the
wire clients translate them to other formats.
"""

from __future__ import annotations

from typing import Any

Item = dict[str, Any]


def user_message(text: str) -> Item:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def developer_message(text: str) -> Item:
    return {
        "type": "message",
        "role": "developer",
        "content": [{"type": "input_text", "text": text}],
    }


def assistant_message(text: str) -> Item:
    return {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text}],
    }


def function_call(name: str, arguments: str, call_id: str) -> Item:
    return {"type": "function_call", "name": name, "arguments": arguments, "call_id": call_id}


def function_call_output(call_id: str, output: str, success: bool) -> Item:
    return {
        "type": "function_call_output",
        "call_id": call_id,
        "output": output,
        "success": success,
    }


def message_text(item: Item) -> str | None:
    """The concatenated text of a message item, or None for other items."""
    if item.get("type") != "message":
        return None
    parts = item.get("content") or ()
    return "".join(p.get("text", "") for p in parts if isinstance(p, dict))


def is_assistant_message(item: Item) -> bool:
    return item.get("type") == "message" and item.get("role") == "assistant"
