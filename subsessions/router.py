"""Running one function call of a session: host tools, the engine's own tools (sub-session
tools, ask_user) and the profile allowlist meet here.

Every call goes through the dispatcher so hooks and permissions see all tools alike, and
every failure becomes a failed output, never an exception. What a session may call is its
`Kit`'s (shared by siblings); the count of calls is the session's own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Protocol

from subsessions.config import ASK_USER, SUBSESSION_TOOL_NAMES
from subsessions.errors import ToolNotSupported, error_text
from subsessions.events import emit
from subsessions.handlers import ask_user
from subsessions.handlers import subsessions as subsession_tools
from subsessions.items import Item, function_call_output
from subsessions.kit import Kit
from subsessions.manager import SubsessionManager
from subsessions.member import Member
from subsessions.tools.schema import check_arguments, parse_arguments


class RouterHost(Member, Protocol):
    """What running a call needs of its session beyond what the manager does."""

    kit: Kit
    tool_calls: int  # function calls run (the session's usage)

    @property
    def subsessions(self) -> SubsessionManager: ...  # the sub-session tools act on it


async def call_tool(host: RouterHost, call: Item) -> Item:
    """Run one function call; every failure becomes a failed output, never an exception."""
    call_id = str(call.get("call_id", ""))
    name = str(call.get("name", ""))
    events = host.events
    host.tool_calls += 1
    emit(events, "tool.execution_start", {"tool_call_id": call_id, "tool_name": name,
                                          "arguments": call.get("arguments")})
    try:
        work = _dispatch(host, name, str(call.get("arguments", "")), call_id)
        tracer = host.runtime.tracer
        output = await (work if tracer is None else tracer.tool(host, call, work))
        success = True
    except Exception as exc:
        output, success = error_text(exc), False
    emit(events, "tool.execution_complete", {"tool_call_id": call_id, "tool_name": name,
                                             "success": success, "result": output})
    return function_call_output(call_id, output, success)


async def _dispatch(host: RouterHost, name: str, arguments: str, call_id: str) -> str:
    kit = host.kit
    tool = kit.tools.get(name)
    builtin: Callable[[dict[str, Any]], Awaitable[str]] | None = None
    if tool is None:
        if name in SUBSESSION_TOOL_NAMES and kit.allows(name):
            builtin = partial(subsession_tools.call_parsed, host.subsessions, name,
                              call_id=call_id)
        elif name == ASK_USER:  # the root's handler decides, whatever the allowlist
            builtin = partial(_ask_user, host)
        else:  # denied by the allowlist, or never offered: no handler runs
            raise ToolNotSupported(name)
    return await host.runtime.dispatcher.call_tool(
        host, tool, name, parse_arguments(name, arguments), call_id, builtin
    )


async def _ask_user(host: RouterHost, arguments: dict[str, Any]) -> str:
    check_arguments(ASK_USER, ask_user.SPEC["parameters"], arguments)
    return await host.runtime.dispatcher.ask_user(
        host, arguments["question"], arguments.get("choices")
    )
