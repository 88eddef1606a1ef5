"""What crosses between the driver and a shard: plain picklable values, never live objects.

A child travels as its config without handlers (each host tool as its definition, built
again on the shard around a proxy), the root's limits and the names of the handlers it has;
host requests travel as `Request`s and come back as `Answer`s.
"""

from __future__ import annotations

from typing import Any

from attrs import frozen

from subsessions.budget import Budget
from subsessions.config import SessionConfig
from subsessions.models.base import NO_USAGE, TokenUsage
from subsessions.otel.wire import TraceContext
from subsessions.profiles import Profile
from subsessions.tools import ToolContext


@frozen
class ToolSpec:
    """A host tool as a shard knows it; its handler stays in the driver."""

    name: str
    description: str
    parameters: dict[str, Any]
    requires_permission: bool
    kind: str  # host (a handler in the driver) | deferred (the host answers) | builtin


@frozen
class RootSpec:
    """What a child's tree needs of its top-level session: limits, agents, which handlers."""

    session_id: str
    max_depth: int
    max_children: int
    custom_agents: tuple[Profile, ...]
    hooks: tuple[str, ...]  # the names of the hooks the root registered
    permission_handler: bool
    user_input_handler: bool
    notify_on_child_end: bool


@frozen
class ChildSpec:
    """One child of a top-level session, to be run on a shard."""

    session_id: str
    rollout_path: str  # its session_meta is in the file already (written by the driver)
    started_at: float
    call_id: str
    prompt: str
    source: dict[str, Any]
    profile: Profile
    config: SessionConfig  # without tools and handlers
    tools: tuple[ToolSpec, ...]  # built-in ones are made anew on the shard in `tool_context`
    tool_context: ToolContext | None
    root: RootSpec
    relay_events: bool  # someone listens in the driver: send the child's events there
    cancel_first: bool  # cancelled before it was sent: end at its first step
    budget_first: tuple[str, float] | None = None  # stopped by a budget before it was sent
    budget: Budget | None = None  # its limits as clamped at spawn
    tree_budget: Budget | None = None  # its tree's limits (None: none)...
    tree_spent: tuple[int, int] = (0, 0)  # ...and what the tree had spent: (turns, tokens)
    inbox: tuple[str, ...] = ()  # messages sent to it before it was sent here
    elapsed: float = 0.0  # seconds since its spawn in the driver: its clock counts from there
    follow_up: bool = False  # a later task (send_message to it ended): history from its rollout
    history: tuple[dict[str, Any], ...] = ()  # a first task's: a fork's copied items
    output_schema: dict[str, Any] | None = None  # a typed child's (its first task)
    token_usage: TokenUsage = NO_USAGE  # its tasks' so far: tokens, and (turns, tool calls);
    counts: tuple[int, int] = (0, 0)
    spent: tuple[int, int] = (0, 0)  # and its meter's (turns, tokens)
    trace: TraceContext | None = None  # the span that spawned it, when the driver traces


@frozen
class Request:
    """A shard asking the driver to run one of the root's handlers (or its model)."""

    request_id: int
    root_id: str
    child_id: str  # the top-level session's child whose tools these are (tool requests)
    kind: str  # model | tool | deferred | hook | permission | user_input
    name: str  # the tool's or hook's name ("" otherwise)
    args: tuple[Any, ...]


@frozen
class Event:
    """An event of a remote child (or one of its descendants), for the driver to forward."""

    root_id: str
    child_id: str  # the top-level session's child whose subtree it happened in
    session_id: str  # the session it happened in
    type: str
    data: dict[str, Any]


@frozen
class Room:
    """A descendant started (+1) or ended (-1) on a shard: the tree's count is the driver's."""

    root_id: str
    delta: int


@frozen
class Call:
    """A model call begins in a remote child's subtree: its live usage counts it at once,
    as in process (a tree with a turn limit asks for the turn instead, kind `turn`)."""

    root_id: str
    child_id: str
    session_id: str
    turns: int  # the session's model calls, this one included
    tool_calls: int  # and its tool calls so far


@frozen
class Spent:
    """A limit of the tree's budget was reached on a shard: the driver ends the tree."""

    root_id: str
    kind: str
    limit: float


@frozen
class Cancel:
    """The shard no longer needs an answer (the calling child was cancelled)."""

    request_id: int


@frozen
class Ended:
    """A remote child's task has ended (its ending is in its rollout): how, or why it
    could not start on the shard (`error`)."""

    session_id: str
    outcome: Outcome | None
    error: str | None = None


@frozen
class Outcome:
    """How a remote child's task ended, once its ending is in its rollout."""

    state: str  # done | failed | cancelled
    result: Any  # its last message, or a typed child's value
    error: str | None
    token_usage: TokenUsage
    turns: int
    tool_calls: int
    answered_by: str | None
    budget_stop: tuple[str, float] | None = None  # failed on a budget: (kind, limit)
    spent: tuple[int, int] = (0, 0)  # its meter: (turns, tokens, its descendants' included)
