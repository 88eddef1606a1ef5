"""The model-callable tools `create_session`, `wait_session`, `cancel_session` (DESIGN 3.1)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

from subsessions.errors import InvalidArguments, UnknownSessionType
from subsessions.handlers.arguments import check_arguments, parse_arguments
from subsessions.ids import id_problem
from subsessions.profiles import Profile

if TYPE_CHECKING:
    from subsessions.session import Session

NAMES = frozenset({"create_session", "wait_session", "cancel_session"})
MAX_TIMEOUT_MS = 3_600_000

_SESSION_ID = {"type": "string", "description": "The id returned by create_session."}

SCHEMAS: dict[str, dict[str, Any]] = {
    "wait_session": {
        "type": "object",
        "properties": {
            "session_id": _SESSION_ID,
            "timeout_ms": {
                "type": "integer",
                "description": "How long to wait in milliseconds; <= 0 only checks; at most "
                "3600000. A wait that times out leaves the sub-session running.",
            },
        },
        "required": ["session_id", "timeout_ms"],
        "additionalProperties": False,
    },
    "cancel_session": {
        "type": "object",
        "properties": {"session_id": _SESSION_ID},
        "required": ["session_id"],
        "additionalProperties": False,
    },
}

_DESCRIPTIONS = {
    "wait_session": "Wait for a sub-session started with create_session and return its final "
    "message.",
    "cancel_session": "Cancel a running sub-session (and the sub-sessions it started).",
}


def create_schema(profile_names: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "session_type": {
                "type": "string",
                "enum": profile_names,
                "description": "The profile the sub-session starts from.",
            },
            "prompt": {
                "type": "string",
                "description": "Everything the sub-session needs to know: it does not see "
                "this conversation.",
            },
        },
        "required": ["session_type", "prompt"],
        "additionalProperties": False,
    }


def tool_specs(profiles: Mapping[str, Profile]) -> tuple[dict[str, Any], ...]:
    """Responses-format definitions; the enum and description list the loaded profiles."""
    listing = "\n".join(f"- {name}: {p.description}" for name, p in profiles.items())
    create = {
        "type": "function",
        "name": "create_session",
        "description": "Start a sub-session that works on a task in the background and return "
        "its id at once; collect its answer later with wait_session. Profiles:\n" + listing,
        "parameters": create_schema(list(profiles)),
    }
    others = (
        {"type": "function", "name": name, "description": _DESCRIPTIONS[name],
         "parameters": SCHEMAS[name]}
        for name in ("wait_session", "cancel_session")
    )
    return (create, *others)


def to_chat_tool(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A Responses-format function definition in the Chat Completions format."""
    return {
        "type": "function",
        "function": {
            "name": spec["name"],
            "description": spec.get("description", ""),
            "parameters": spec.get("parameters", {}),
        },
    }


def _session_id(tool: str, arguments: dict[str, Any]) -> str:
    session_id: str = arguments["session_id"]
    problem = id_problem(session_id)
    if problem is not None:
        raise InvalidArguments(tool, problem)
    return session_id


def _dump(value: Any) -> str:
    return orjson.dumps(value).decode()


async def call(session: Session, name: str, raw: str, call_id: str) -> str:
    """Run one of the three tools for `session`; errors are raised with DESIGN 3.1 texts."""
    arguments = parse_arguments(name, raw)
    manager = session.subsessions
    if name == "create_session":
        profiles = manager.profiles()
        schema = create_schema(list(profiles))
        schema["properties"]["session_type"] = {"type": "string"}  # unknown names: own text
        check_arguments(name, schema, arguments)
        if arguments["session_type"] not in profiles:
            raise UnknownSessionType(arguments["session_type"], tuple(profiles))
        if not arguments["prompt"].strip():
            raise InvalidArguments(name, "prompt must not be empty")
        child_id = await manager.spawn_child(
            arguments["session_type"], arguments["prompt"], call_id=call_id
        )
        return _dump({"session_id": child_id})
    check_arguments(name, SCHEMAS[name], arguments)
    session_id = _session_id(name, arguments)
    if name == "wait_session":
        timeout_ms = min(int(arguments["timeout_ms"]), MAX_TIMEOUT_MS)
        return _dump({"result": await manager.wait_child_ms(session_id, timeout_ms)})
    return _dump({"cancelled": await manager.cancel_child(session_id)})
