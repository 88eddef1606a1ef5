"""The engine's events in the Copilot SDKs' shapes: each translated event is accepted by the
SDK's own generated parser (the Python SDK silently drops an event it cannot parse), and
the host's answers map to the engine's."""

from __future__ import annotations

from typing import Any

import pytest

from subsessions.serve import wire

events = pytest.importorskip("copilot.generated.session_events",
                             reason="the Copilot Python SDK: pip install 'subsessions[test]'")


def describe(name: str) -> tuple[str, str]:
    return name.title(), f"the {name} agent"


ENGINE_EVENTS: list[tuple[str, dict[str, Any]]] = [
    ("assistant.message", {"content": "hi"}),
    ("tool.execution_start", {"tool_call_id": "c1", "tool_name": "t", "arguments": '{"a": 1}'}),
    ("tool.execution_start", {"tool_call_id": "c1", "tool_name": "t", "arguments": "not json",
                              "parent_tool_call_id": "spawn"}),
    ("tool.execution_complete", {"tool_call_id": "c1", "tool_name": "t", "success": True,
                                 "result": "ok"}),
    ("tool.execution_complete", {"tool_call_id": "c1", "tool_name": "t", "success": False,
                                 "result": "boom"}),
    ("external_tool.requested", {"request_id": "req_1", "session_id": "s", "tool_call_id": "c",
                                 "tool_name": "t", "arguments": {"a": 1}}),
    ("subagent.started", {"tool_call_id": "c", "agent_name": "checker",
                          "agent_display_name": "x", "remote_session_id": "r"}),
    ("subagent.completed", {"tool_call_id": "c", "agent_name": "checker", "model": "m",
                            "total_tokens": 3, "total_tool_calls": 1, "duration_ms": 12}),
    ("subagent.failed", {"tool_call_id": "c", "agent_name": None, "error": "cancelled",
                         "cancelled": True, "duration_ms": 1}),
]


@pytest.mark.parametrize(("kind", "data"), ENGINE_EVENTS)
def test_every_translated_event_parses_with_the_sdk(kind: str, data: dict[str, Any]) -> None:
    out = wire.translate(kind, data, describe)
    assert out is not None
    event = events.session_event_from_dict(wire.envelope(kind, out, None, "agent-1"))
    assert event.type.value == kind and event.agent_id == "agent-1"
    if "parent_tool_call_id" in data:
        assert event.data.parent_tool_call_id == "spawn"


def test_the_shapes_a_host_reads() -> None:
    start = wire.translate("tool.execution_start", ENGINE_EVENTS[1][1], describe)
    assert start is not None and start["arguments"] == {"a": 1}
    failed = wire.translate("tool.execution_complete", ENGINE_EVENTS[4][1], describe)
    assert failed == {"toolCallId": "c1", "success": False, "error": {"message": "boom"}}
    started = wire.translate("subagent.started", ENGINE_EVENTS[6][1], describe)
    assert started == {"toolCallId": "c", "agentName": "checker", "agentDisplayName": "Checker",
                       "agentDescription": "the checker agent"}
    assert wire.translate("session.start", {}, describe) is None
    assert wire.translate("permission.requested", {}, describe) is None
    session_start = events.session_event_from_dict(
        wire.envelope("session.start", wire.session_start("s", "m", "/w"), None))
    assert session_start.data.session_id == "s" and session_start.data.producer == "subsessions"


@pytest.mark.parametrize(("decision", "kind"), [
    ({"kind": "approve-once"}, "approved"),
    ({"kind": "approve-for-session"}, "approved"),
    ({"kind": "approved"}, "approved"),
    ({"kind": "reject", "feedback": "no"}, "denied-interactively-by-user"),
    ({"kind": "user-not-available"}, "denied-no-approval-rule-and-could-not-request-from-user"),
    ({"kind": "denied-by-rules"}, "denied-by-rules"),
    ({"kind": "made-up"}, "denied-no-approval-rule-and-could-not-request-from-user"),
    (None, "denied-no-approval-rule-and-could-not-request-from-user"),
    ("approve-once", "approved"),
])
def test_permission_decisions(decision: Any, kind: str) -> None:
    assert wire.decision_kind(decision) == kind


def test_tool_answers() -> None:
    assert wire.tool_answer("plain", None) == ("plain", None)
    assert wire.tool_answer({"textResultForLlm": "t", "resultType": "success"}, None) == ("t", None)
    assert wire.tool_answer({"textResultForLlm": "why", "resultType": "failure"}, None) == (
        None, "why")
    assert wire.tool_answer(None, "it broke") == (None, "it broke")
    assert wire.tool_answer(None, None)[1] == (
        "the host answered with neither a result nor an error")
    assert wire.tool_answer({"odd": 1}, None) == ('{"odd":1}', None)


def test_hook_input_in_the_wire_shape() -> None:
    assert wire.hook_input({"session_id": "s", "timestamp": 1.5, "cwd": "/w", "tool_name": "t",
                            "tool_args": {"a": 1}}) == {
        "sessionId": "s", "timestamp": 1500, "cwd": "/w", "toolName": "t", "toolArgs": {"a": 1}}
