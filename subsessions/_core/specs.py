"""The definitions of the sub-session tools, built from a tree's profiles.

Values only: the handlers that run these tools live in `tool_calls/`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from subsessions.budget import KINDS
from subsessions.config import ASK_USER, PARENT_MESSAGE, SUBSESSION_TOOL_NAMES
from subsessions.profiles import Profile

NAMES = SUBSESSION_TOOL_NAMES

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
    "list_sessions": {"type": "object", "properties": {}, "additionalProperties": False},
    "send_message": {
        "type": "object",
        "properties": {
            "session_id": _SESSION_ID,
            "message": {"type": "string", "minLength": 1,
                        "description": "What to tell the sub-session, as its user would."},
        },
        "required": ["session_id", "message"],
        "additionalProperties": False,
    },
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
    "list_sessions": "Your sub-sessions, oldest first: status, usage so far (tokens, turns, "
    "tool calls), seconds running and the last message each wrote.",
    "run_batch": "Run one sub-session per item of a .csv or .jsonl file in the workspace, "
    "at most max_concurrency at once (null: 16), and wait for all: prompt is a template "
    "where {column} stands for the item's field ({{ and }} for braces). Each item's outcome "
    "goes to output_path (.jsonl or .csv); the answer counts them and lists the first "
    "failed items. Journaled under the batch_id it returns.",
    "send_message": "Tell a sub-session something: a running one reads it before its next "
    "step ('queued'); an ended one starts again on its history with it ('started'), and "
    "wait_session then waits for that new answer.",
}
_ORDER = ("wait_session", "cancel_session", "wait_sessions", "run_sessions", "list_profiles",
          "list_sessions", "send_message", "run_batch")


def run_schema(profile_names: list[str]) -> dict[str, Any]:
    task = {
        "type": "object",
        "properties": {
            "session_type": {"type": "string", "enum": profile_names},
            "prompt": {"type": "string"},
            "fork_turns": FORK_SCHEMA,
            "output_schema": OUTPUT_SCHEMA,
        },
        "required": ["session_type", "prompt", "fork_turns", "output_schema"],
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


BUDGET_SCHEMA: dict[str, Any] = {
    "type": ["object", "null"],
    "description": "Limits for the sub-session (clamped to what this session and its tree "
    "have left); null for none. Reaching one stops it as failed.",
    "properties": {key: {"type": [kind, "null"], "exclusiveMinimum": 0}
                   for key, kind in KINDS.items()},
    "required": list(KINDS),
    "additionalProperties": False,
}


FORK_SCHEMA: dict[str, Any] = {
    "anyOf": [{"type": "null"}, {"type": "string", "enum": ["none", "all"]},
              {"type": "integer", "minimum": 1}],
    "description": "null or 'none': the sub-session starts from its prompt alone; 'all': "
    "from a copy of this conversation so far; N: from its last N turns (this one counted).",
}


OUTPUT_SCHEMA: dict[str, Any] = {
    "type": ["object", "null"],
    "description": "null, or a JSON Schema the sub-session's result must match: it then "
    "answers by calling submit_result, and its result is that value.",
}


ISOLATION_SCHEMA: dict[str, Any] = {
    "type": ["string", "null"],
    "enum": ["none", "worktree", None],
    "description": "null or 'none': the sub-session works in this workspace (or as its "
    "profile says); 'worktree': in a git worktree of its own, on a branch of its own.",
}


def batch_schema(profile_names: list[str]) -> dict[str, Any]:
    path = "A path inside the workspace, relative to it or absolute"
    return {
        "type": "object",
        "properties": {
            "session_type": {"type": "string", "enum": profile_names,
                             "description": "The profile every item's sub-session starts from."},
            "input_path": {"type": "string", "description": f"{path}: a .csv file (its first "
                           "row names the columns) or a .jsonl file (one object a line)."},
            "prompt": {"type": "string", "description": "The prompt template, e.g. 'Summarise "
                       "{title}: {body}'."},
            "output_path": {"type": "string", "description": f"{path}: .jsonl or .csv; "
                            "replaced if it exists; not the input."},
            "max_concurrency": {"type": ["integer", "null"], "minimum": 1},
            "budget": BUDGET_SCHEMA,
            "output_schema": OUTPUT_SCHEMA,
            "fork_turns": FORK_SCHEMA,
        },
        "required": ["session_type", "input_path", "prompt", "output_path", "max_concurrency",
                     "budget", "output_schema", "fork_turns"],
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
            "budget": BUDGET_SCHEMA,
            "fork_turns": FORK_SCHEMA,
            "output_schema": OUTPUT_SCHEMA,
            "isolation": ISOLATION_SCHEMA,
        },
        "required": ["session_type", "prompt", "budget", "fork_turns", "output_schema",
                     "isolation"],
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
    schemas = {**SCHEMAS, "run_sessions": run_schema(list(profiles)),
               "run_batch": batch_schema(list(profiles))}
    others = (
        {"type": "function", "name": name, "description": _DESCRIPTIONS[name],
         "parameters": schemas[name]}
        for name in _ORDER
    )
    return (create, *others)


# `ask_user`: offered only when the host registered a `user_input_handler`; a child's
# question goes to the root's handler, so children never wait on a prompt of their own.
ASK_USER_SPEC: dict[str, Any] = {
    "type": "function",
    "name": ASK_USER,
    "description": "Ask the user a question and wait for the answer. Use sparingly.",
    "parameters": {
        "type": "object",
        "properties": {
            "question": {"type": "string", "minLength": 1},
            "choices": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["question"],
        "additionalProperties": False,
    },
}

# `send_parent_message`: offered to children (depth >= 1) whose allowlist
# admits it; the parent reads the text before its next model call.
PARENT_MESSAGE_SPEC: dict[str, Any] = {
    "type": "function",
    "name": PARENT_MESSAGE,
    "description": "Send a short message to the session that started you (progress, a "
    "question, an early finding); it reads it before its next step. Your final answer "
    "still goes in your last message.",
    "parameters": {
        "type": "object",
        "properties": {"message": {"type": "string", "minLength": 1}},
        "required": ["message"],
        "additionalProperties": False,
    },
}


def heard(child_id: str, message: str) -> str:
    """The line a parent's model reads for its child's message."""
    return f"[message from child session {child_id}] {message}"
