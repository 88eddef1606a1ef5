"""ToolRouter: a session's tools, what its model is offered, and running one function call.

Host tools, the engine's own tools (sub-session tools, ask_user) and the profile
allowlist meet here; every call goes through the dispatcher so hooks and permissions see
all tools alike, and every failure becomes a failed output, never an exception.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Protocol

from attrs import define, field

from subsessions.config import ASK_USER, SUBSESSION_TOOL_NAMES, Tool
from subsessions.errors import ToolNotSupported, error_text
from subsessions.events import emit
from subsessions.handlers import ask_user
from subsessions.handlers import subsessions as subsession_tools
from subsessions.items import Item, function_call_output
from subsessions.manager import SubsessionManager
from subsessions.member import Member
from subsessions.tools.schema import check_arguments, parse_arguments
from subsessions.tree import Specs


class RouterHost(Member, Protocol):
    """What the router needs of its session beyond what the manager does."""

    @property
    def subsessions(self) -> SubsessionManager: ...  # the sub-session tools act on it

    def allows(self, tool_name: str) -> bool: ...


@define(eq=False)
class ToolRouter:
    _host: RouterHost
    _tools: dict[str, Tool]
    _specs: Specs | None = field(default=None, init=False)
    calls: int = field(default=0, init=False)  # function calls run (the session's usage)

    def tools(self) -> tuple[Tool, ...]:
        return tuple(self._tools.values())

    def replace_tools(self, tools: tuple[Tool, ...]) -> None:
        """Drop (an ended child's) or restore (before it runs again) the tools."""
        self._tools = {t.name: t for t in tools}
        self._specs = None

    def specs(self) -> Specs:
        """What the model is offered: fixed for the session's life (the tree caches it)."""
        if self._specs is None:
            host = self._host
            self._specs = host.tree.specs_for(host.config, host.profile, host.depth,
                                              self._build_specs)
        return self._specs

    def _build_specs(self) -> Specs:
        host = self._host
        specs = tuple(t.spec() for t in self._tools.values())
        if host.tree.config.user_input_handler is not None:  # never gated by the allowlist
            specs += (ask_user.SPEC,)
        if host.depth < host.tree.max_depth:  # only those the allowlist admits
            specs += tuple(s for s in host.tree.subsession_specs() if host.allows(s["name"]))
        return specs

    async def call(self, call: Item) -> Item:
        """Run one function call; every failure becomes a failed output, never an exception."""
        call_id = str(call.get("call_id", ""))
        name = str(call.get("name", ""))
        events = self._host.events
        self.calls += 1
        emit(events, "tool.execution_start", {"tool_call_id": call_id, "tool_name": name,
                                              "arguments": call.get("arguments")})
        try:
            output = await self._dispatch(name, str(call.get("arguments", "")), call_id)
            success = True
        except Exception as exc:
            output, success = error_text(exc), False
        emit(events, "tool.execution_complete", {"tool_call_id": call_id, "tool_name": name,
                                                 "success": success, "result": output})
        return function_call_output(call_id, output, success)

    async def _dispatch(self, name: str, arguments: str, call_id: str) -> str:
        host = self._host
        tool = self._tools.get(name)
        builtin: Callable[[dict[str, Any]], Awaitable[str]] | None = None
        if tool is None:
            if name in SUBSESSION_TOOL_NAMES and host.allows(name):
                builtin = partial(subsession_tools.call_parsed, host.subsessions, name,
                                  call_id=call_id)
            elif name == ASK_USER:  # the root's handler decides, whatever the allowlist
                builtin = self._ask_user
            else:  # denied by the allowlist, or never offered: no handler runs
                raise ToolNotSupported(name)
        return await host.runtime.dispatcher.call_tool(
            host, tool, name, parse_arguments(name, arguments), call_id, builtin
        )

    async def _ask_user(self, arguments: dict[str, Any]) -> str:
        check_arguments(ASK_USER, ask_user.SPEC["parameters"], arguments)
        return await self._host.runtime.dispatcher.ask_user(
            self._host, arguments["question"], arguments.get("choices")
        )
