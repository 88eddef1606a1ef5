"""Our engine's events in the Copilot SDKs' shapes (camelCase data their generated schemas
require). Pure functions: what a served session emits and when is `served.py`'s business.

Not translated (None): events with no wire counterpart, and those a served session emits
itself (`session.start`, `permission.requested`, the ends of a task).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import orjson

from subsessions._util.clock import clock
from subsessions._version import __version__

PRODUCER = "subsessions"
Describe = Callable[[str], tuple[str, str]]  # agent name -> (display name, description)


def envelope(
    kind: str, data: dict[str, Any], parent_id: str | None, agent_id: str | None = None
) -> dict[str, Any]:
    event: dict[str, Any] = {"id": str(uuid.uuid4()), "timestamp": clock.now(),
                             "parentId": parent_id, "type": kind, "data": data}
    if agent_id is not None:
        event["agentId"] = agent_id
    return event


def session_start(session_id: str, model: str, cwd: str) -> dict[str, Any]:
    return {"sessionId": session_id, "version": 1, "producer": PRODUCER,
            "copilotVersion": __version__, "startTime": clock.now(), "selectedModel": model,
            "context": {"cwd": cwd}}


def translate(kind: str, data: dict[str, Any], describe: Describe) -> dict[str, Any] | None:
    """The wire data of one engine event, or None when it has none."""
    parent = data.get("parent_tool_call_id")
    out: dict[str, Any] | None
    if kind == "assistant.message":
        out = {"content": data.get("content") or "", "messageId": str(uuid.uuid4())}
    elif kind == "tool.execution_start":
        out = {"toolCallId": data["tool_call_id"], "toolName": data["tool_name"],
               "arguments": _arguments(data.get("arguments"))}
    elif kind == "tool.execution_complete":
        result = str(data.get("result", ""))
        out = {"toolCallId": data["tool_call_id"], "success": bool(data.get("success"))}
        if out["success"]:
            out["result"] = {"content": result}
        else:
            out["error"] = {"message": result}
    elif kind == "external_tool.requested":
        out = {"requestId": data["request_id"], "sessionId": data["session_id"],
               "toolCallId": data["tool_call_id"], "toolName": data["tool_name"],
               "arguments": data.get("arguments")}
    elif kind.startswith("subagent."):
        out = _subagent(kind, data, describe)
    else:
        return None
    if out is not None and parent is not None and kind != "external_tool.requested":
        out["parentToolCallId"] = parent
    return out


def _subagent(kind: str, data: dict[str, Any], describe: Describe) -> dict[str, Any] | None:
    name = str(data.get("agent_name") or "custom")
    display, description = describe(name)
    out: dict[str, Any] = {"toolCallId": data["tool_call_id"], "agentName": name,
                           "agentDisplayName": display}
    if kind == "subagent.started":
        out["agentDescription"] = description
        return out
    if kind not in ("subagent.completed", "subagent.failed"):
        return None
    out.update({"model": data.get("model"), "totalTokens": data.get("total_tokens"),
                "totalToolCalls": data.get("total_tool_calls"),
                "durationMs": data.get("duration_ms")})
    if kind == "subagent.failed":
        out["error"] = str(data.get("error", ""))
    return out


def _arguments(raw: Any) -> Any:
    """A call's arguments as the model wrote them: an object when they parse as one."""
    if isinstance(raw, str):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            return raw
    return raw


def hook_input(data: dict[str, Any]) -> dict[str, Any]:
    """An engine hook input in the wire's shape (timestamp in epoch milliseconds)."""
    names = {"session_id": "sessionId", "tool_name": "toolName", "tool_args": "toolArgs",
             "tool_result": "toolResult"}
    out = {names.get(key, key): value for key, value in data.items()}
    stamp = out.get("timestamp")
    if isinstance(stamp, int | float):
        out["timestamp"] = int(stamp * 1000)
    return out


SUBAGENT_HOOKS = ("subagentStart", "subagentStop")


def subagent_hook_input(kind: str, root_id: str, data: dict[str, Any]) -> dict[str, Any]:
    """A child's start or stop as the SDK's `subagentStart` / `subagentStop` input: the
    session is the host's (the child's parent's tree), the agent is the child."""
    out: dict[str, Any] = {
        "sessionId": root_id, "timestamp": int(float(data.get("timestamp", 0)) * 1000),
        "workingDirectory": "", "agentName": data.get("agent_name") or "custom",
        "agentId": data.get("session_id"),
    }
    if kind == "subagentStart":
        out.update(transcriptPath="", parentAgentId=data.get("parent_id"))
    else:
        out.update(transcriptPath=data.get("transcript_path") or "",
                   agentType=out["agentName"], stopReason="end_turn",
                   response=data.get("last_assistant_message") or "",
                   stopHookActive=bool(data.get("stop_hook_active")))
    return out


def subagent_hook_output(output: Any) -> dict[str, Any] | None:
    """The SDK's answer in the engine's words (`additionalContext`, a block's reason)."""
    if not isinstance(output, dict):
        return None
    if isinstance(output.get("additionalContext"), str):
        return {"additional_context": output["additionalContext"]}
    if output.get("decision") == "block":
        return {"decision": "block", "reason": output.get("reason")}
    return None


# A host's answer to `permission.requested` (a decision, protocol v3) as our result kinds.
_APPROVED = {"approve-once", "approve-for-session", "approve-read-only-for-session",
             "approve-for-location", "approve-permanently", "approved",
             "approved-for-session", "approved-for-location"}
_DENIED = {"reject": "denied-interactively-by-user", "cancelled": "denied-interactively-by-user",
           "user-not-available": "denied-no-approval-rule-and-could-not-request-from-user"}


def decision_kind(decision: Any) -> str:
    kind = decision.get("kind") if isinstance(decision, dict) else decision
    if kind in _APPROVED:
        return "approved"
    if isinstance(kind, str) and kind.startswith("denied-"):
        return kind
    return _DENIED.get(str(kind), "denied-no-approval-rule-and-could-not-request-from-user")


def tool_answer(result: Any, error: Any) -> tuple[Any, str | None]:
    """`handlePendingToolCall`'s `result` (text or a ToolResult object) and `error` as the
    engine's (result, error)."""
    if isinstance(error, str) and error:
        return None, error
    if isinstance(result, dict):
        text = result.get("textResultForLlm")
        text = text if isinstance(text, str) else orjson.dumps(result).decode()
        if result.get("resultType") in ("failure", "rejected", "denied"):
            return None, text or str(result.get("error") or "the tool failed")
        return text, None
    if result is None:
        return None, "the host answered with neither a result nor an error"
    return result, None
