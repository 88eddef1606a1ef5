"""What a host hands the engine: session configuration, tools and hooks."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeAlias

from attrs import evolve, field, frozen

from subsessions.budget import Budget
from subsessions.environment import EnvPolicy
from subsessions.profiles import Profile, check_tool_choice


@frozen
class Invocation:
    """Who is calling a tool: the calling session (child or not) and its agent."""

    session_id: str
    tool_call_id: str
    tool_name: str
    agent_name: str | None = None


ToolHandler: TypeAlias = Callable[[dict[str, Any], Invocation], Any | Awaitable[Any]]


@frozen
class Tool:
    """A function the model may call. `handler=None` makes it deferred (answered by the host)."""

    name: str
    description: str
    parameters: dict[str, Any] = field(factory=lambda: {"type": "object", "properties": {}})
    handler: ToolHandler | None = None
    requires_permission: bool = False  # ask the root's permission_handler before each call

    def spec(self) -> dict[str, Any]:
        """Responses-format function definition."""
        return {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
        }


HookFn: TypeAlias = Callable[[dict[str, Any]], Any]


@frozen
class Hooks:
    """Handlers a top-level session's tree calls at its events (each sync or async).

    Every input is a dict carrying the `session_id` of the session the event happened in
    (a child's own id for a child's tool call). `on_pre_tool_use` may answer
    `{"permissionDecision": "deny", "permissionDecisionReason": ...}` or
    `{"modifiedArgs": {...}}`; `on_post_tool_use` may replace the output. A hook that
    raises is logged and ignored, except `on_spawn`: asked before any child of the tree is
    admitted, it denies with `{"decision": "deny", "reason": r}` (or by raising), and the
    spawn fails with `spawn denied: {r}`.
    """

    on_pre_tool_use: HookFn | None = None
    on_post_tool_use: HookFn | None = None
    on_user_prompt_submitted: HookFn | None = None
    on_session_start: HookFn | None = None
    on_session_end: HookFn | None = None
    on_error_occurred: HookFn | None = None
    on_spawn: HookFn | None = None  # the root's consent before any child of its tree
    # For every child of the tree: its start may add context to its first
    # message; its stop may keep it going (`{"decision": "block", "reason": ...}`)
    on_subagent_start: HookFn | None = None
    on_subagent_stop: HookFn | None = None


def _path_or_none(value: str | os.PathLike[str] | None) -> str | None:
    return None if value is None else os.fspath(value)


def _each(kind: type, name: str) -> Callable[[Any, Any, tuple[Any, ...]], None]:
    def check(_instance: Any, _attribute: Any, values: tuple[Any, ...]) -> None:
        for value in values:
            if not isinstance(value, kind):
                raise TypeError(f"{name} must hold {kind.__name__} objects, not {value!r:.60}")

    return check


def _optional(kind: type | tuple[type, ...], name: str) -> Callable[[Any, Any, Any], None]:
    def check(_instance: Any, _attribute: Any, value: Any) -> None:
        if value is not None and not isinstance(value, kind):
            raise TypeError(f"{name} has the wrong type: {value!r:.60}")

    return check


# The one registry of the engine's tool names. A host tool must not shadow a reserved one.
SUBSESSION_TOOL_NAMES = frozenset({
    "create_session", "wait_session", "cancel_session", "wait_sessions", "run_sessions",
    "list_profiles", "list_sessions", "send_message", "run_batch",
})
ASK_USER = "ask_user"
PARENT_MESSAGE = "send_parent_message"
SUBMIT_RESULT = "submit_result"  # a typed child's answer
RESERVED_TOOL_NAMES = SUBSESSION_TOOL_NAMES | {ASK_USER, PARENT_MESSAGE, SUBMIT_RESULT}
BUILTIN_TOOL_NAMES = ("shell", "apply_patch", "read_file", "list_dir")


def _at_least_one(name: str) -> Callable[[Any, Any, int], None]:
    def check(_instance: Any, _attribute: Any, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer of at least 1, not {value!r}")

    return check


def _non_negative(name: str) -> Callable[[Any, Any, int], None]:
    def check(_instance: Any, _attribute: Any, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, not {value!r}")

    return check


TURN_END_POLICIES = ("leave", "wait", "cancel")


def _turn_end(_instance: Any, _attribute: Any, value: Any) -> None:
    if value not in TURN_END_POLICIES:
        raise ValueError(f"children_at_turn_end must be one of {', '.join(TURN_END_POLICIES)}, "
                         f"not {value!r:.40}")


def _tools(value: Iterable[Tool]) -> tuple[Tool, ...]:
    return tuple(value)


def _agents(value: Iterable[Profile]) -> tuple[Profile, ...]:
    return tuple(value)


@frozen
class SessionConfig:
    """A top-level session's configuration; children's are derived from it and a profile."""

    model: str | None = field(default=None, validator=_optional(str, "model"))
    instructions: str | None = field(default=None, validator=_optional(str, "instructions"))
    tools: tuple[Tool, ...] = field(default=(), converter=_tools, validator=_each(Tool, "tools"))
    custom_agents: tuple[Profile, ...] = field(
        default=(), converter=_agents, validator=_each(Profile, "custom_agents")
    )
    permission_handler: Callable[..., Any] | None = None
    hooks: Hooks | None = field(default=None, validator=_optional(Hooks, "hooks"))
    user_input_handler: Callable[..., Any] | None = None
    cwd: str | None = field(default=None, converter=_path_or_none)
    max_depth: int = field(default=2, validator=_non_negative("max_depth"))
    max_children: int = field(default=8, validator=_non_negative("max_children"))
    # spawns beyond max_children wait in a FIFO queue this long (0: they are refused)
    max_queued: int = field(default=256, validator=_non_negative("max_queued"))
    max_turns: int = field(default=24, validator=_at_least_one("max_turns"))
    notify_on_child_end: bool = True  # tell the model of children that ended unwaited
    # a child that ends while its (top-level) parent is idle starts a parent task
    wake_on_child_end: bool = False
    # a child's send_parent_message reaching this idle top-level session starts a task too
    wake_on_message: bool = False
    # the model ends its turn while its children run: leave them (notices come next turn),
    # wait for them (and call the model again with their notices), or cancel them
    children_at_turn_end: str = field(default="leave", validator=_turn_end)
    # how often `on_subagent_stop` may keep one child's task going
    max_stop_blocks: int = field(default=3, validator=_non_negative("max_stop_blocks"))
    # a root's: the whole tree's budget; a child's: its own (clamped at spawn)
    budget: Budget | None = field(default=None, validator=_optional(Budget, "budget"))
    # shell / apply_patch / read_file / list_dir: True for all, or a tuple of their names
    builtin_tools: bool | tuple[str, ...] = False
    sandbox: str = "workspace-write"  # read-only | workspace-write | danger-full-access
    network_access: bool = False  # under workspace-write
    approval: str = "on-request"  # untrusted | on-request | never (children: always never)
    # what of the engine's environment built-in `shell` commands see (Codex's default policy)
    env_policy: EnvPolicy = field(factory=EnvPolicy)
    max_processes: int = field(default=1024, validator=_at_least_one("max_processes"))
    # [mcp_servers.NAME]-shaped tables: their tools join `tools` as mcp__{server}__{tool}
    mcp_servers: Mapping[str, Any] = field(factory=dict)
    # auto | required | none | a tool's name: what each task's model calls may do until a
    # tool has been called, then auto (the OpenAI Agents SDK's reset_tool_choice)
    tool_choice: str = "auto"
    # open the engine's control socket (home/control/) for `subsessions watch`
    control: bool = False

    def __attrs_post_init__(self) -> None:
        check_tool_choice(self.tool_choice)
        names = [t.name for t in self.tools]
        if len(set(names)) != len(names):
            raise ValueError(f"tool names must be unique: {names}")
        taken = set(RESERVED_TOOL_NAMES)
        if self.builtin_tools is True:
            taken |= set(BUILTIN_TOOL_NAMES)
        elif self.builtin_tools:
            taken |= set(self.builtin_tools)
        clash = sorted(taken.intersection(names))
        if clash:
            raise ValueError(f"tool name {clash[0]!r} is the engine's own; choose another")


def filter_tools(tools: Iterable[Tool], allowlist: tuple[str, ...] | None) -> tuple[Tool, ...]:
    """The tools an agent may use, in allowlist order; unknown names are skipped."""
    tools = tuple(tools)
    if allowlist is None:
        return tools
    by_name = {t.name: t for t in tools}
    return tuple(by_name[name] for name in dict.fromkeys(allowlist) if name in by_name)


def derive_config(
    base: SessionConfig, profile: Profile, *, model: str | None = None, cwd: str | None = None,
    builtins: tuple[Tool, ...] = (),
) -> SessionConfig:
    """What a profile makes of a config: the one place that policy lives.

    Top-level (no `model`): `base` with the profile's instructions, persona and memory
    appended, its model unless `base` names one, its allowlist and turn limit. For a child
    (`model` is its parent's): a new config with the profile's developer instructions alone
    (its persona and memory never reach a child's model) and model,
    `base`'s host tools plus `builtins` (built anew for the child) under the allowlist,
    the parent's cwd and limits.
    """
    if model is None:
        parts = (base.instructions, profile.developer_instructions, profile.persona,
                 profile.memory)
        return evolve(
            base,
            instructions="\n\n".join(p for p in parts if p),
            model=base.model or profile.remote_model or (
                None if profile.model == "inherit" else profile.model),
            tools=filter_tools(base.tools, profile.tools),
            max_turns=profile.max_turns,
            budget=base.budget or profile.budget,
            tool_choice=base.tool_choice if base.tool_choice != "auto" else profile.tool_choice,
            sandbox=profile.sandbox or base.sandbox,  # a profile narrows it, never widens
        )
    custom = [t for t in base.tools if t.name not in BUILTIN_TOOL_NAMES]
    return SessionConfig(
        model=profile.remote_model or (model if profile.model == "inherit" else profile.model),
        instructions=profile.developer_instructions,
        tools=filter_tools((*custom, *builtins), profile.tools),
        cwd=cwd,
        max_depth=base.max_depth,
        max_children=base.max_children,
        max_turns=profile.max_turns,
        notify_on_child_end=base.notify_on_child_end,
        budget=profile.budget,
        tool_choice=profile.tool_choice,
        sandbox=profile.sandbox or "workspace-write",  # narrowed, as its rollout records
    )


def as_child_config(config: SessionConfig, model: str, cwd: str) -> tuple[Profile, SessionConfig]:
    """A config a host passed for a child (used as given), labelled `custom`."""
    label = Profile(name="custom", developer_instructions=config.instructions or "",
                    max_turns=config.max_turns)
    return label, evolve(config, model=config.model or model, cwd=config.cwd or cwd)
