"""The hosts' hooks around a task: its prompt before the first model call, and its end
(events, `on_error_occurred`, `on_session_end`), run beside the ending, never delaying it."""

from __future__ import annotations

from typing import Any

from subsessions._core.conversation import Conversation
from subsessions.errors import SubsessionError
from subsessions.events import emit


def budget_limited(terminal: dict[str, Any]) -> bool:
    """Whether a task's terminal record is a budget's ending."""
    return terminal.get("reason") == "budget_limited"


async def prompt_hooks(host: Conversation, prompt: str, first: bool) -> str:
    dispatcher = host.runtime.dispatcher
    if host.is_child and first:
        await dispatcher.invoke_hook(host, "on_session_start", {"source": "subsession"})
    changed = await dispatcher.invoke_hook(host, "on_user_prompt_submitted", {"prompt": prompt})
    if isinstance(changed, dict) and isinstance(changed.get("modifiedPrompt"), str):
        return str(changed["modifiedPrompt"])
    return prompt


def announce_end(host: Conversation, terminal: dict[str, Any]) -> None:
    failure: str | None = (terminal.get("error") or {}).get("message")
    if budget_limited(terminal):
        failure = terminal["message"]
    kind = "error" if failure is not None else terminal["type"]
    if host.heard and failure is not None:
        emit(host.events, "session.error", {"message": failure})
    elif host.heard:
        emit(host.events, "session.idle", {"aborted": kind == "turn_aborted"})
    hooks = host.tree.config.hooks
    if hooks is None:
        return
    dispatcher = host.runtime.dispatcher
    if failure is not None and hooks.on_error_occurred is not None:
        hook_later(host, dispatcher.invoke_hook(host, "on_error_occurred", {"error": failure}))
    if host.is_child and hooks.on_session_end is not None:
        hook_later(host, dispatcher.invoke_hook(host, "on_session_end", {
            "reason": {"task_complete": "complete", "error": "error"}.get(kind, "abort"),
        }))


def hook_later(host: Conversation, hook: Any) -> None:
    """End-of-task hooks run beside the ending, never delaying or blocking it."""
    try:
        host.runtime.spawn_task(hook, "subsessions-hook", while_closing=True)
    except SubsessionError:  # the engine is closed: the hook cannot run any more
        hook.close()
