"""A served session's history as the Copilot SDKs' events (`session.getMessages`, what an
SDK's `session.get_events()` asks after a resume to show the conversation so far).

The history is the session's conversation items (a resumed session's come from its rollout):
its start, then each user and assistant message and each tool call and its result, chained
by `parentId` as live events are. Instructions and notices the host never sent are left out.
"""

from __future__ import annotations

import time
from typing import Any

from subsessions.items import Item, message_text
from subsessions.serve import wire

_ROLES = {"user": "user.message", "assistant": "assistant.message"}


def replay(session_id: str, model: str, cwd: str, started_at: float,
           items: list[Item]) -> list[dict[str, Any]]:
    start = wire.session_start(session_id, model, cwd)
    start["startTime"] = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(started_at))
    events = [wire.envelope("session.start", start, None)]
    for item in items:
        data = _event(item)
        if data is not None:
            events.append(wire.envelope(data[0], data[1], events[-1]["id"]))
    return events


def _event(item: Item) -> tuple[str, dict[str, Any]] | None:
    kind = item.get("type")
    if kind == "message":
        name = _ROLES.get(str(item.get("role")))
        if name is None:
            return None
        content = message_text(item) or ""
        if name == "user.message":
            return name, {"content": content}
        return name, _translated(name, {"content": content})
    if kind == "function_call":
        return "tool.execution_start", _translated("tool.execution_start", {
            "tool_call_id": item.get("call_id", ""), "tool_name": item.get("name", ""),
            "arguments": item.get("arguments")})
    if kind == "function_call_output":
        return "tool.execution_complete", _translated("tool.execution_complete", {
            "tool_call_id": item.get("call_id", ""), "result": item.get("output", ""),
            "success": item.get("success", True)})
    return None


def _translated(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    out = wire.translate(kind, data, lambda name: (name, ""))
    assert out is not None  # these kinds always have a wire shape
    return out
