"""The model-callable tools `create_session`, `wait_session`, `cancel_session` (DESIGN 3.1)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

from subsessions.errors import InvalidArguments, UnknownSessionType, echo
from subsessions.handlers.arguments import check_arguments, parse_arguments
from subsessions.profiles import Profile

if TYPE_CHECKING:
    from subsessions.session import Session

NAMES = frozenset({
    "create_session", "wait_session", "cancel_session", "wait_sessions", "run_sessions",
    "list_profiles",
})
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
    "wait_sessions": {
        "type": "object",
        "properties": {
            "session_ids": {"type": "array", "items": {"type": "string"}},
            "timeout_ms": {"type": "integer"},
            "mode": {"type": "string", "enum": ["any", "all"]},
        },
        "required": ["session_ids", "timeout_ms", "mode"],
        "additionalProperties": False,
    },
    "list_profiles": {"type": "object", "properties": {}, "additionalProperties": False},
}

_DESCRIPTIONS = {
    "wait_session": "Wait for a sub-session started with create_session and return its final "
    "message.",
    "cancel_session": "Cancel a running sub-session (and the sub-sessions it started).",
    "wait_sessions": "Wait for several sub-sessions: mode 'any' returns when one has ended, "
    "'all' when all have; on timeout, what has ended so far (the rest keep running).",
    "run_sessions": "Run several sub-sessions and collect their answers: 'parallel' runs all at "
    "once; 'chain' runs them in order, '{previous}' in a prompt standing for the previous "
    "answer, and stops at the first failure.",
    "list_profiles": "The profiles sub-sessions can be started from: names, descriptions, tools.",
}
_ORDER = ("wait_session", "cancel_session", "wait_sessions", "run_sessions", "list_profiles")


def run_schema(profile_names: list[str]) -> dict[str, Any]:
    task = {
        "type": "object",
        "properties": {
            "session_type": {"type": "string", "enum": profile_names},
            "prompt": {"type": "string"},
        },
        "required": ["session_type", "prompt"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {
            "mode": {"type": "string", "enum": ["parallel", "chain"]},
            "tasks": {"type": "array", "items": task},
            "timeout_ms": {"type": "integer"},
        },
        "required": ["mode", "tasks", "timeout_ms"],
        "additionalProperties": False,
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
    schemas = {**SCHEMAS, "run_sessions": run_schema(list(profiles))}
    others = (
        {"type": "function", "name": name, "description": _DESCRIPTIONS[name],
         "parameters": schemas[name]}
        for name in _ORDER
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


def _dump(value: Any) -> str:
    return orjson.dumps(value).decode()


async def call(session: Session, name: str, raw: str, call_id: str) -> str:
    """Run one of the sub-session tools for `session`; errors are raised with DESIGN 3.1 texts."""
    return await call_parsed(session, name, parse_arguments(name, raw), call_id)


async def call_parsed(
    session: Session, name: str, arguments: dict[str, Any], call_id: str
) -> str:
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
    if name == "run_sessions":
        return await _run_sessions(session, arguments, call_id)
    check_arguments(name, SCHEMAS[name], arguments)
    if name == "list_profiles":
        return _dump([
            {"name": p.name, "description": p.description,
             "tools": None if p.tools is None else list(p.tools)}
            for p in manager.profiles().values()
        ])
    if name == "wait_sessions":
        return await _wait_sessions(session, arguments)
    session_id: str = arguments["session_id"]  # any id not of a child: `unknown session`
    if name == "wait_session":
        timeout_ms = min(int(arguments["timeout_ms"]), MAX_TIMEOUT_MS)
        return _dump({"result": await manager.wait_child_ms(session_id, timeout_ms)})
    cancelled = await manager.cancel_child(session_id)
    if cancelled:
        manager.mark_seen(session_id)  # the model cancelled it: no notice needed
    return _dump({"cancelled": cancelled})


def _timeout_seconds(arguments: dict[str, Any]) -> float:
    return min(int(arguments["timeout_ms"]), MAX_TIMEOUT_MS) / 1000


async def _wait_sessions(session: Session, arguments: dict[str, Any]) -> str:
    ids: list[str] = arguments["session_ids"]
    if not ids:
        raise InvalidArguments("wait_sessions", "session_ids must not be empty")
    manager = session.subsessions
    seconds = _timeout_seconds(arguments)
    if arguments["mode"] == "any":
        waited = await manager.wait_any(ids, seconds)
    else:
        waited = await manager.wait_all(ids, seconds)
    results: dict[str, Any] = {cid: info.outcome() for cid, info in waited.children.items()}
    for unknown in waited.unknown:
        results[unknown] = {"status": "unknown", "error": f"unknown session {echo(unknown)}"}
    return _dump({"results": results, "timed_out": waited.timed_out})


async def _run_sessions(session: Session, arguments: dict[str, Any], call_id: str) -> str:
    manager = session.subsessions
    profiles = manager.profiles()
    schema = run_schema(list(profiles))
    schema["properties"]["tasks"]["items"]["properties"]["session_type"] = {"type": "string"}
    check_arguments("run_sessions", schema, arguments)
    tasks = [(t["session_type"], t["prompt"]) for t in arguments["tasks"]]
    if not tasks:
        raise InvalidArguments("run_sessions", "tasks must not be empty")
    for kind, prompt in tasks:
        if kind not in profiles:
            raise UnknownSessionType(kind, tuple(profiles))
        if not prompt.strip():
            raise InvalidArguments("run_sessions", "every prompt must be non-empty")
    seconds = _timeout_seconds(arguments)
    if arguments["mode"] == "parallel":
        run = await manager.run_parallel(list(tasks), seconds, call_id=call_id)
    else:
        run = await manager.run_chain(list(tasks), seconds, call_id=call_id)
    body: dict[str, Any] = {
        "mode": arguments["mode"],
        "results": [step.outcome() for step in run.steps],
        "timed_out": run.timed_out,
    }
    if run.failed_step is not None:
        failed = run.steps[run.failed_step].outcome()
        body["failed_step"] = run.failed_step
        body["error"] = (
            f"step {run.failed_step} ({tasks[run.failed_step][0]}) "
            f"{'timed out' if run.timed_out else 'failed: ' + str(failed.get('error'))}"
        )
    return _dump(body)
