"""The hosts' hooks around a task: its prompt before the first model call (a child's start
hook may add context), a child's stop hook as its model ends a turn (it may keep the child
going), and its end (events, `on_error_occurred`, `on_session_end`), run beside the ending,
never delaying it."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from subsessions._core.conversation import Conversation
from subsessions.errors import SubsessionError
from subsessions.events import emit

log = logging.getLogger("subsessions")
CHILD_HOOK_SECONDS = 30.0  # a child's start or stop hook that takes longer allows it


def budget_limited(terminal: dict[str, Any]) -> bool:
    """Whether a task's terminal record is a budget's ending."""
    return terminal.get("reason") == "budget_limited"


async def prompt_hooks(host: Conversation, prompt: str, first: bool) -> str:
    dispatcher = host.runtime.dispatcher
    if host.is_child and first:
        await dispatcher.invoke_hook(host, "on_session_start", {"source": "subsession"})
        prompt = await _subagent_start(host, prompt)
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



async def _child_hook(host: Conversation, name: str, data: dict[str, Any]) -> Any:
    """One of the root's child hooks; one that raises (logged by the dispatcher) or takes
    longer than `CHILD_HOOK_SECONDS` answers nothing, which allows."""
    try:
        async with asyncio.timeout(CHILD_HOOK_SECONDS):
            return await host.runtime.dispatcher.invoke_hook(host, name, data)
    except TimeoutError:
        log.warning("subsessions: hook %s took over %gs; allowed", name, CHILD_HOOK_SECONDS)
        return None


async def _subagent_start(host: Conversation, prompt: str) -> str:
    """`on_subagent_start`: its `additional_context` joins the child's first message."""
    hooks = host.tree.config.hooks
    if hooks is None or hooks.on_subagent_start is None:
        return prompt
    parent = host.parent
    answer = await _child_hook(host, "on_subagent_start", {
        "parent_id": parent.session_id if parent is not None else None,
        "agent_name": host.agent_name, "prompt": prompt, "depth": host.depth})
    context = answer.get("additional_context") if isinstance(answer, dict) else None
    return f"{prompt}\n\n{context}" if isinstance(context, str) and context.strip() else prompt


async def stop_blocked(host: Conversation, answer: str | None, blocks: int) -> str | None:
    """`on_subagent_stop` as a child's model ends its turn: the reason it runs on (a block,
    at most the root's `max_stop_blocks` a task), or None to let it end."""
    hooks = host.tree.config.hooks
    if (hooks is None or hooks.on_subagent_stop is None
            or blocks >= host.tree.config.max_stop_blocks):
        return None
    said = await _child_hook(host, "on_subagent_stop", {
        "agent_name": host.agent_name, "last_assistant_message": answer,
        "transcript_path": host.rollout_path, "stop_hook_active": blocks > 0})
    if not isinstance(said, dict) or said.get("decision") != "block":
        return None
    reason = said.get("reason")
    return reason if isinstance(reason, str) and reason.strip() else "Keep working."
