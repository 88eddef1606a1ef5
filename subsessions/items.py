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


def output_problem(item: Any) -> str | None:
    """What makes a model's output item unusable, or None: checked before it is recorded."""
    if not isinstance(item, dict) or not isinstance(item.get("type"), str):
        return "an output item must be an object with a type"
    if item["type"] == "message":
        parts = item.get("content")
        if not isinstance(parts, list) or not all(
            isinstance(p, dict) and isinstance(p.get("text", ""), str) for p in parts
        ):
            return "a message's content must be a list of parts with text"
    elif item["type"] == "function_call" and not (
        isinstance(item.get("name"), str) and isinstance(item.get("arguments", ""), str)
    ):
        return "a function_call needs a name and arguments as text"
    return None


def is_assistant_message(item: Item) -> bool:
    return item.get("type") == "message" and item.get("role") == "assistant"
