"""A rollout as a plain-text transcript, for the `rollout://{id}` MCP resources.

Kept here (rather than reusing the terminal renderer of `subsessions rollouts show`)
so the resource text stays stable and colour-free whatever the CLI does.
"""

from __future__ import annotations

from typing import Any

from subsessions.rollouts import Rollout
from subsessions.rollouts.summary import instructions_of, spawn_of
from subsessions.rollouts.values import parts_text, text

_MAX_FIELD = 4000  # a tool output this long is cut in the transcript (the rollout keeps it)


def _cut(value: str) -> str:
    if len(value) <= _MAX_FIELD:
        return value
    return f"{value[:_MAX_FIELD]}… ({len(value) - _MAX_FIELD} more characters)"


def _source(meta: dict[str, Any]) -> str:
    spawn = spawn_of(meta)
    if spawn is not None:
        return (f"sub-session of {spawn['parent']} (depth {spawn['depth']}, "
                f"call {spawn['call_id']})")
    return str(meta.get("source"))


def _item_lines(payload: dict[str, Any]) -> list[str]:
    kind = payload.get("type")
    if kind == "message":
        return [f"[{payload.get('role')}]", _cut(parts_text(payload.get("content"), "\n"))]
    if kind == "function_call":
        return [f"[tool call {payload.get('call_id')}] {payload.get('name')} "
                f"{_cut(str(payload.get('arguments')))}"]
    if kind == "function_call_output":
        ok = "ok" if payload.get("success", True) is not False else "failed"
        return [f"[tool output {payload.get('call_id')}, {ok}]", _cut(text(payload.get("output")))]
    if kind == "reasoning":
        summary = parts_text(payload.get("summary"), "\n")
        return [f"[reasoning] {_cut(summary)}"] if summary else []
    return [f"[{kind}]"]


def _event_lines(payload: dict[str, Any]) -> list[str]:
    kind = payload.get("type")
    if kind == "background_event":
        return [f"[background] {payload.get('message')}"]
    if kind == "task_started":
        return ["--- task started ---"]
    if kind == "task_complete":
        return ["--- task complete ---"]
    if kind == "turn_aborted":
        return [f"--- aborted ({payload.get('reason')}) ---"]
    if kind == "error":
        return [f"--- error: {payload.get('message')} ---"]
    return []  # user_message / agent_message repeat the items; token_count is noise here


def render_transcript(rollout: Rollout) -> str:
    """The readable transcript of one rollout: header, then one entry per record."""
    meta = rollout.meta
    lines = [
        f"session {meta.get('id')}",
        f"type: {meta.get('session_type') or 'top-level'}",
        f"source: {_source(meta)}",
        f"model: {meta.get('model')} ({meta.get('model_provider')})",
        f"started: {meta.get('timestamp')}",
        f"cwd: {meta.get('cwd')}",
        f"status: {rollout.status}",  # the word `subsessions rollouts` and list_rollouts use
    ]
    errors = rollout.events("error") if rollout.status == "failed" else []
    if errors:
        lines.append(f"error: {_cut(text(errors[-1].get('message')))}")
    instructions = instructions_of(meta)
    if instructions:
        lines += ["instructions:", _cut(instructions)]
    lines.append("")
    for record in rollout.records:
        payload = record.get("payload")
        if not isinstance(payload, dict):
            continue
        if record.get("type") == "response_item":
            lines += _item_lines(payload)
        elif record.get("type") == "event_msg":
            lines += _event_lines(payload)
    if rollout.skipped:
        lines.append(f"({len(rollout.skipped)} unreadable line(s) skipped)")
    return "\n".join(lines).rstrip() + "\n"
