"""A model's function calls: host tools, the engine's own tools (the sub-session tools,
`ask_user`, `send_parent_message`) and the profile's allowlist meet here. Every failure
becomes a failed output the model reads, never an exception."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from subsessions._core.conversation import Conversation
from subsessions._core.specs import ASK_USER_SPEC
from subsessions._core.tool_calls import parent_message
from subsessions._core.tool_calls import subsessions as subsession_tools
from subsessions._core.typed import Typed
from subsessions.config import ASK_USER, PARENT_MESSAGE, SUBMIT_RESULT, SUBSESSION_TOOL_NAMES
from subsessions.errors import ToolNotSupported, error_text
from subsessions.events import emit
from subsessions.items import Item, function_call_output
from subsessions.tools.schema import check_arguments, parse_arguments


async def call_tool(host: Conversation, call: Item) -> Item:
    """Run one function call; every failure becomes a failed output, never an exception."""
    call_id = str(call.get("call_id", ""))
    name = str(call.get("name", ""))
    host.tool_calls += 1
    if host.heard:
        emit(host.events, "tool.execution_start", {"tool_call_id": call_id, "tool_name": name,
                                                   "arguments": call.get("arguments")})
    try:
        work = _dispatch(host, name, str(call.get("arguments", "")), call_id)
        tracer = host.runtime.tracer
        output = await (work if tracer is None else tracer.tool(host, call, work))
        success = True
    except Exception as exc:
        output, success = error_text(exc), False
    if host.heard:
        emit(host.events, "tool.execution_complete", {
            "tool_call_id": call_id, "tool_name": name, "success": success, "result": output})
    return function_call_output(call_id, output, success)


async def _dispatch(host: Conversation, name: str, arguments: str, call_id: str) -> str:
    kit = host.kit
    tool = kit.tools.get(name)
    builtin: Callable[[dict[str, Any]], Awaitable[str]] | None = None
    if tool is None:
        if name in SUBSESSION_TOOL_NAMES and kit.allows(name):
            builtin = partial(subsession_tools.call_parsed, host.subsessions, name,
                              call_id=call_id)
        elif name == ASK_USER:  # the root's handler decides, whatever the allowlist
            builtin = partial(_ask_user, host)
        elif name == SUBMIT_RESULT and host.typed is not None:  # a typed child's answer
            builtin = partial(_submit, host.typed)
        elif name == PARENT_MESSAGE and host.depth >= 1 and kit.allows(name):
            builtin = partial(parent_message.call, host)
        else:  # denied by the allowlist, or never offered: no handler runs
            raise ToolNotSupported(name)
    return await host.runtime.dispatcher.call_tool(
        host, tool, name, parse_arguments(name, arguments), call_id, builtin
    )


async def _ask_user(host: Conversation, arguments: dict[str, Any]) -> str:
    check_arguments(ASK_USER, ASK_USER_SPEC["parameters"], arguments)
    return await host.runtime.dispatcher.ask_user(
        host, arguments["question"], arguments.get("choices")
    )


async def _submit(typed: Typed, arguments: dict[str, Any]) -> str:
    return typed.submit(arguments)
