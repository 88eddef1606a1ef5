"""What `session.create` / `session.resume` ask for, as an engine `SessionConfig`.

SDK tools have their handlers in the host, so each becomes a deferred tool (answered by
`session.tools.handlePendingToolCall`); it asks the host's permission first unless the
host said `skipPermission` or registered no permission handler. Custom agents become
session-scoped profiles carrying their tool allowlists. Options of the real runtime that
have no meaning here (models, MCP, skills, telemetry, ...) are accepted and ignored.
"""

from __future__ import annotations

from typing import Any

from attrs import frozen

from subsessions.config import SessionConfig, Tool
from subsessions.engine.instructions import BASE_INSTRUCTIONS
from subsessions.errors import InvalidArguments
from subsessions.profiles import Profile
from subsessions.serve.served import HostBridge
from subsessions.settings import Settings


@frozen
class SessionOptions:
    config: SessionConfig
    agents: dict[str, tuple[str, str]]  # name -> (display name, description)
    descriptions: dict[str, str]  # tool name -> description


def session_options(params: dict[str, Any], bridge: HostBridge, settings: Settings,
                    cwd: str) -> SessionOptions:
    ask_permission = params.get("requestPermission") is True
    tools = [_tool(raw, ask_permission) for raw in _list(params, "tools")]
    agents = [_agent(raw) for raw in _list(params, "customAgents")]
    model = params.get("model")
    directory = params.get("workingDirectory")
    config = SessionConfig(
        model=model if isinstance(model, str) and model else None,
        instructions=_instructions(params.get("systemMessage")),
        tools=tools,
        custom_agents=[profile for profile, _ in agents],
        permission_handler=bridge.permission if ask_permission else None,
        hooks=bridge.hooks() if params.get("hooks") is True else None,
        user_input_handler=bridge.ask_user if params.get("requestUserInput") is True else None,
        cwd=directory if isinstance(directory, str) and directory else cwd,
        max_depth=settings.max_depth,
        max_children=settings.max_children,
        max_queued=settings.max_queued,
    )
    return SessionOptions(
        config, {profile.name: shown for profile, shown in agents},
        {tool.name: tool.description for tool in tools},
    )


def _list(params: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = params.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise InvalidArguments("session.create", f"{key} must be a list of objects")
    return value


def _text(raw: dict[str, Any], key: str, what: str, default: str | None = None) -> str:
    value = raw.get(key, default)
    if not isinstance(value, str) or (default is None and not value):
        raise InvalidArguments("session.create", f"{what} needs a string {key}")
    return value


def _tool(raw: dict[str, Any], ask_permission: bool) -> Tool:
    name = _text(raw, "name", "a tool")
    parameters = raw.get("parameters") or {"type": "object", "properties": {}}
    if not isinstance(parameters, dict):
        raise InvalidArguments("session.create", f"tool {name}: parameters must be an object")
    return Tool(name=name, description=_text(raw, "description", f"tool {name}", ""),
                parameters=parameters, handler=None,
                requires_permission=ask_permission and raw.get("skipPermission") is not True)


def _agent(raw: dict[str, Any]) -> tuple[Profile, tuple[str, str]]:
    name = _text(raw, "name", "a custom agent")
    tools = raw.get("tools")
    if tools is not None and (not isinstance(tools, list)
                              or not all(isinstance(t, str) for t in tools)):
        raise InvalidArguments("session.create", f"agent {name}: tools must be a list of names")
    model = raw.get("model")
    description = _text(raw, "description", f"agent {name}", "")
    profile = Profile(name=name, description=description,
                      developer_instructions=_text(raw, "prompt", f"agent {name}", ""),
                      model=model if isinstance(model, str) and model else "inherit",
                      tools=tools)
    return profile, (_text(raw, "displayName", f"agent {name}", name), description)


def _instructions(message: Any) -> str | None:
    """The SDK's `systemMessage`: `replace` mode is the whole text; `append` (its default)
    follows the runtime's own, here the base instructions."""
    if not isinstance(message, dict) or not isinstance(message.get("content"), str):
        return None
    content = str(message["content"])
    return content if message.get("mode") == "replace" else f"{BASE_INSTRUCTIONS}\n\n{content}"
