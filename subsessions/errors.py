"""Every error the engine raises on purpose derives from one base.

    SubsessionError
    ├── UnknownSession            id is not a child of this session / not a session
    ├── ChildNotFinished          wait with timeout <= 0 on a running child
    ├── ChildTimeout              (also TimeoutError) the wait ran out; the child runs on
    ├── ChildFailed               the child ended with an error (carries it)
    ├── ChildCancelled            the child was cancelled
    ├── UnknownSessionType        no profile of that name
    ├── DepthLimitReached         spawning would exceed max_depth
    ├── ChildLimitReached         max_children already running in this tree
    │   └── QueueFull             ... and max_queued spawns already waiting
    ├── SpawnDenied               the root's on_spawn hook refused a child
    ├── InvalidArguments          malformed tool arguments or API input
    ├── SessionBusy               a task is already running in that session
    ├── EngineClosed              the engine is closed or closing
    ├── MaxTurnsExceeded          a task looped past its profile's max_turns
    ├── BudgetExhausted           a session (or its tree) reached a budget limit
    ├── ModelError                the model client failed (scripted or real)
    │   ├── ModelUnavailable      the provider does not serve that model: try a fallback
    │   ├── MalformedStream       the provider broke the protocol; retrying will not help
    │   ├── InvalidHistory        a history item lacks a field the wire format needs
    │   └── RemoteAgentError      a remote A2A agent (a2a_url) failed, or asked for input
    ├── ToolNotSupported          a tool the calling agent may not use, or that does not exist
    ├── PermissionDenied          a permission request was not approved
    ├── McpToolError              an MCP server's tool failed (server and tool named)
    ├── ToolError                 a built-in tool refused or failed (subsessions.tools.errors)
    ├── ProfileError              a profile file is malformed
    ├── ConfigError               config.toml or a flag is malformed
    │   └── MissingApiKey         the provider's key variable is not set
    ├── RolloutError              a rollout file cannot be written or read
    ├── BatchError                a batch's input, template, paths or journal is unusable
    ├── UnsafeHome                the home is owned or writable by another user
    ├── ControlUnavailable        a control socket cannot be opened or reached (control.paths)
    ├── RpcError                  a JSON-RPC error answer, with its code (control.rpc)
    ├── WorkerLost                the shard (Ray actor or node) running a child died
    └── RemoteError               an error in another process (shard or driver), as its text

Messages are built from the fields, so the error texts the tools show live here only.
"""

from __future__ import annotations

_MAX_ECHO = 80


def echo(value: str) -> str:
    """Quote untrusted input in a message without letting it flood the message."""
    return value if len(value) <= _MAX_ECHO else value[:_MAX_ECHO] + "…"


def error_text(exc: BaseException) -> str:
    """An exception as one line for a model or a rollout: its message, else its type."""
    text = str(exc)
    return text if text else type(exc).__name__


class SubsessionError(Exception):
    """Base of every error this package raises on purpose."""


class UnknownSession(SubsessionError):
    """The id names no child of this session (or, for the engine, no session it holds).

    Raised for ids that are not UUIDs, path-like ids such as `../x`, and another parent's
    or another connection's sessions alike. Message: `unknown session {id}`.

    Attributes:
        session_id: the id as given (cut to 80 characters in the message).
    """
    def __init__(self, session_id: str, message: str | None = None) -> None:
        self.session_id = session_id
        super().__init__(message or f"unknown session {echo(session_id)}")


class ChildNotFinished(SubsessionError):
    """`wait_child(id, timeout<=0)` on a child that is still running.

    Message: `session {id} has not completed`.

    Attributes:
        session_id: the child's id.
    """
    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id} has not completed")


class ChildTimeout(SubsessionError, TimeoutError):
    """A wait ran out of time; the child keeps running. Also a `TimeoutError`.

    Message: `session {id} did not complete within {timeout_ms}ms`.

    Attributes:
        session_id: the child's id.
        timeout_ms: the wait's timeout, in milliseconds.
    """
    def __init__(self, session_id: str, timeout_ms: int) -> None:
        self.session_id = session_id
        self.timeout_ms = timeout_ms
        super().__init__(f"session {session_id} did not complete within {timeout_ms}ms")


class StillRunning(SubsessionError, TimeoutError):
    """`send_and_wait(timeout=...)` stopped waiting; the task goes on. Also a `TimeoutError`.

    Message: `session {id} is still running after {timeout}s; its task goes on`.

    Attributes:
        session_id: the session's id.
        timeout: the wait's timeout, in seconds.
    """

    def __init__(self, session_id: str, timeout: float) -> None:
        self.session_id = session_id
        self.timeout = timeout
        super().__init__(f"session {session_id} is still running after {timeout:g}s; "
                         "its task goes on")


class ChildFailed(SubsessionError):
    """The child ended with an error: its model failed, a budget stopped it, ...

    Message: `session {id} failed: {error}`.

    Attributes:
        session_id: the child's id.
        error: the child's own error text, e.g. `budget exhausted: turns limit 3 reached`.
    """
    def __init__(self, session_id: str, error: str) -> None:
        self.session_id = session_id
        self.error = error
        super().__init__(f"session {session_id} failed: {error}")


class ChildCancelled(SubsessionError):
    """The child was cancelled (by its parent, the host, or a closing engine).

    Message: `session {id} was cancelled`.

    Attributes:
        session_id: the child's id.
    """
    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id} was cancelled")


class UnknownSessionType(SubsessionError):
    """No profile of that name is loaded (nor among the session's `custom_agents`).

    Message: `unknown session_type {name}; expected one of: {names}`.

    Attributes:
        name: the name asked for.
        expected: the names that exist.
    """
    def __init__(self, name: str, expected: tuple[str, ...]) -> None:
        self.name = name
        self.expected = expected
        super().__init__(
            f"unknown session_type {echo(name)}; expected one of: {', '.join(expected)}"
        )


class DepthLimitReached(SubsessionError):
    """Spawning would nest deeper than `max_depth` (the top-level session is depth 0).

    Message: `sub-session depth limit reached (max_depth={n}); solve the task yourself`.

    Attributes:
        max_depth: the tree's limit.
    """
    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        super().__init__(
            f"sub-session depth limit reached (max_depth={max_depth}); solve the task yourself"
        )


class ChildLimitReached(SubsessionError):
    """`max_children` children already run in this tree and spawns may not queue
    (`max_queued=0`).

    Message: `sub-session limit reached (max_children={n}); wait for or cancel a running
    session first`.

    Attributes:
        max_children: the tree's limit.
    """
    def __init__(self, max_children: int, message: str | None = None) -> None:
        self.max_children = max_children
        super().__init__(message or (
            f"sub-session limit reached (max_children={max_children}); "
            "wait for or cancel a running session first"
        ))


class QueueFull(ChildLimitReached):
    """`max_children` run and `max_queued` spawns already wait: the queue is full.

    Message: `sub-session queue full (max_children={n}, max_queued={m}); wait for or cancel
    a running session first`.

    Attributes:
        max_children: the tree's limit on running children.
        max_queued: the limit on waiting spawns.
    """
    def __init__(self, max_children: int, max_queued: int) -> None:
        self.max_queued = max_queued
        super().__init__(max_children, f"sub-session queue full (max_children={max_children}, "
                         f"max_queued={max_queued}); wait for or cancel a running session first")


class SpawnDenied(SubsessionError):
    """The tree's root's `on_spawn` hook refused a child (or failed: consent was not given).

    Message: `spawn denied: {reason}`.

    Attributes:
        reason: the hook's `reason`, or its error's text.
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"spawn denied: {reason}")


class WorktreeUnavailable(SubsessionError):
    """A worktree child cannot be made: no git repository at the parent's
    cwd, no commit to start from, or git failed.

    Message: `isolation "worktree" needs a git repository at {cwd}`, or what git said.
    """


class InvalidArguments(SubsessionError, ValueError):
    """Malformed tool arguments or API input. Also a `ValueError`.

    Message: `invalid arguments for {target}: {problem}`.

    Attributes:
        target: the tool or function, e.g. `create_session`, `spawn_child`.
        problem: what is wrong, e.g. `missing required field prompt`.
    """
    def __init__(self, target: str, problem: str) -> None:
        self.target = target
        self.problem = problem
        super().__init__(f"invalid arguments for {target}: {problem}")


class SessionBusy(SubsessionError):
    """The session cannot do that now: a task already runs in it, it is open elsewhere, ...

    Message: `session {id} {state}`, e.g. `session {id} is already running a task`.

    Attributes:
        session_id: the session's id.
    """
    def __init__(self, session_id: str, state: str = "is already running a task") -> None:
        self.session_id = session_id
        super().__init__(f"session {session_id} {state}")


class EngineClosed(SubsessionError):
    """A call on an engine that is closed or closing. Message: `the engine is closed`."""
    def __init__(self) -> None:
        super().__init__("the engine is closed")


class MaxTurnsExceeded(SubsessionError):
    """A task kept calling tools past its `max_turns` model calls without a final answer.

    Message: `max_turns ({n}) exceeded without a final answer`.

    Attributes:
        max_turns: the limit that was reached.
    """
    def __init__(self, max_turns: int) -> None:
        self.max_turns = max_turns
        super().__init__(f"max_turns ({max_turns}) exceeded without a final answer")


class OutputMismatch(SubsessionError):
    """A typed child (`output_schema`) did not submit a result that validates, in its tries.

    Message: `result did not match output_schema: {detail}` (the first validation error, or
    `no submit_result call`).

    Attributes:
        detail: what was wrong.
    """
    def __init__(self, detail: str) -> None:
        self.detail = detail
        super().__init__(f"result did not match output_schema: {detail}")


class BudgetExhausted(SubsessionError):
    """A budget limit was reached (a session's own, or one of an ancestor's or the tree's).

    Message: `budget exhausted: {kind} limit {limit} reached`.

    Attributes:
        kind: `turns`, `tokens` or `seconds`.
        limit: the limit that was reached (model calls, tokens or seconds).
    """

    def __init__(self, kind: str, limit: float) -> None:
        self.kind = kind
        self.limit = limit
        shown = f"{limit:g}" if isinstance(limit, float) else str(limit)
        super().__init__(f"budget exhausted: {kind} limit {shown} reached")


class ModelError(SubsessionError):
    """The model client failed; the message says how."""


class ModelUnavailable(ModelError):
    """The provider says the model does not exist or is not served: try a fallback."""


class MalformedStream(ModelError):
    """The provider sent something that is not the protocol; retrying will not help."""


class InvalidHistory(ModelError):
    """A history item cannot be put on the wire (a field is missing): no request is sent."""


class RemoteAgentError(ModelError):
    """A child that is a remote A2A agent (a profile's `a2a_url`) could not
    answer: unreachable, a bad agent card, a failed task, or a question (`input-required`:
    children never block on a human). One line, naming the agent."""

    def __init__(self, url: str, problem: str, *, question: str | None = None) -> None:
        self.url, self.problem, self.question = url, problem, question
        if question is not None:
            super().__init__(f"remote agent needs input: {question}")
        else:
            super().__init__(f"remote agent {url}: {problem}")


class ToolNotSupported(SubsessionError):
    """A tool the calling agent's allowlist does not admit, or that does not exist.

    Message: `Tool '{name}' is not supported by this client instance.` (the Copilot SDKs'
    text). The host's handler is not called.

    Attributes:
        name: the tool's name.
    """
    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"Tool '{echo(name)}' is not supported by this client instance.")


class PermissionDenied(SubsessionError):
    """A permission request was not approved (or a child had no one to ask).

    Message: `permission to run {name} was not granted ({kind})`.

    Attributes:
        kind: the handler's answer (e.g.
            `denied-no-approval-rule-and-could-not-request-from-user`), or a denying
            `on_pre_tool_use` hook's reason.
    """
    def __init__(self, name: str, kind: str) -> None:
        self.kind = kind
        super().__init__(f"permission to run {name} was not granted ({kind})")


class McpToolError(SubsessionError):
    """A call of an MCP server's tool failed; the message names the server and the tool."""

    def __init__(self, server: str, tool: str, problem: str) -> None:
        self.server = server
        self.tool = tool
        self.problem = problem
        super().__init__(f"MCP server {server}, tool {tool}: {problem}")


class ProfileError(SubsessionError):
    """A profile file is malformed (our TOML profiles are strict).

    Message: `{source}: {problem}`.

    Attributes:
        source: the file.
        problem: what is wrong, e.g. `max_turns must be an integer, not str`.
    """
    def __init__(self, source: str, problem: str) -> None:
        self.source = source
        self.problem = problem
        super().__init__(f"{source}: {problem}")


class ConfigError(SubsessionError):
    """`config.toml` or a command-line flag is malformed.

    Message: `{source}: {key}: {problem}`, e.g. `config.toml: agents.foo: unknown key`.

    Attributes:
        source: the file, `command line` or `environment`.
        key: the key or flag (`-` for the whole file).
        problem: what is wrong.
    """
    def __init__(self, source: str, key: str, problem: str, message: str | None = None) -> None:
        self.source = source
        self.key = key
        self.problem = problem
        where = source if key == "-" else f"{source}: {key}"
        super().__init__(message or f"{where}: {problem}")


class MissingApiKey(ConfigError):
    """The provider's key variable is not set (a loopback base URL needs none).

    Message: `set {env_key} to your API key for provider {provider} ({base_url})`.
    """
    def __init__(self, env_key: str, provider: str, base_url: str) -> None:
        super().__init__(
            "environment", env_key, "not set",
            f"set {env_key} to your API key for provider {provider} ({base_url})",
        )


class RolloutError(SubsessionError):
    """A rollout file cannot be read or written.

    Message: `{path}: {problem}`.

    Attributes:
        path: the file (or the home).
        problem: what is wrong.
    """
    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class BatchError(SubsessionError):
    """A batch refused before it runs (or a resume refused): one line saying what and where.
    Nothing was started and nothing was overwritten."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(problem)


class UnsafeHome(SubsessionError):
    """Like ssh with `~/.ssh`: a home others can write could be made to lie or to overwrite."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"refusing home {path}: {problem}")


class WorkerLost(SubsessionError):
    """A remote child's shard died with it: the child ends Failed with this text."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"worker lost: {reason}")


class RemoteError(SubsessionError):
    """An error raised in another process (a host handler run in the driver for a remote
    child, or a remote child's failure), carried as the text it gives in process."""

    def __init__(self, text: str) -> None:
        self.text = text
        super().__init__(text)
