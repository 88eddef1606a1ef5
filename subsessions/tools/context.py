"""What the built-in tools of one session run under: workspace, sandbox and approval policy."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import attrs
from attrs import field, frozen

from subsessions.environment import EnvPolicy

SANDBOX_MODES = ("read-only", "workspace-write", "danger-full-access")
APPROVAL_POLICIES = ("untrusted", "on-request", "never")
NO_APPROVAL = "denied-no-approval-rule-and-could-not-request-from-user"
PERMISSION_KINDS = frozenset({
    "approved",
    "denied-by-rules",
    "denied-interactively-by-user",
    NO_APPROVAL,
    "denied-by-content-exclusion-policy",
})


def permission_kind(answer: Any) -> str:
    """A permission handler's answer (a kind, or `{"kind": ...}`) as one of the
    permission result kinds; anything else denies. The one normalisation of permission answers."""
    kind = answer.get("kind") if isinstance(answer, dict) else answer
    return kind if kind in PERMISSION_KINDS else NO_APPROVAL

AskPermission = Callable[[dict[str, Any]], Awaitable[str] | str]  # async, or a plain function


def _one_of(name: str, allowed: tuple[str, ...]) -> Callable[[Any, Any, str], None]:
    def check(_instance: Any, _attribute: Any, value: str) -> None:
        if value not in allowed:
            raise ValueError(f"{name} must be one of: {', '.join(allowed)}; not {value!r}")

    return check


def _positive(_instance: Any, _attribute: Any, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 64:
        raise ValueError(f"output_budget_bytes must be an integer >= 64, not {value!r}")


def _paths(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    return tuple(value)


@frozen
class ToolContext:
    """The session's workspace and policies; a child gets `for_child()` of its parent's.

    `sandbox`: `read-only` (nothing writable), `workspace-write` (`cwd`, `writable_roots`
    and the temp dirs writable; network off unless `network_access`), `danger-full-access`
    (no sandbox). `approval` has Codex's meanings: `never` never asks (an escalation
    request is refused), `on-request` asks `ask_permission` when the model requests to run
    outside the sandbox, `untrusted` asks before any command that is not known to be a
    safe read-only one. No `ask_permission` means every question is answered
    `denied-no-approval-rule-and-could-not-request-from-user`.
    """

    cwd: str
    sandbox: str = field(default="workspace-write", validator=_one_of("sandbox", SANDBOX_MODES))
    network_access: bool = False
    approval: str = field(default="never", validator=_one_of("approval", APPROVAL_POLICIES))
    ask_permission: AskPermission | None = None
    writable_roots: tuple[str, ...] = field(default=(), converter=_paths)
    # Read-only even inside a writable root: the engine's home (its config.toml names MCP
    # servers that run unsandboxed next time; its rollouts are the record of the run)
    read_only_paths: tuple[str, ...] = field(default=(), converter=_paths)
    output_budget_bytes: int = field(default=64 * 1024, validator=_positive)
    # Codex's switches to keep $TMPDIR and /tmp out of the writable roots of workspace-write
    exclude_tmpdir_env_var: bool = False
    exclude_slash_tmp: bool = False
    env_policy: EnvPolicy = field(factory=EnvPolicy)  # what of our environment commands get
    max_processes: int = 1024  # per sandboxed command (RLIMIT_NPROC in its user namespace)

    def sandbox_policy(self) -> dict[str, Any]:
        return sandbox_policy(self.sandbox, self.network_access, self.writable_roots,
                              self.exclude_tmpdir_env_var, self.exclude_slash_tmp)

    def for_child(self) -> ToolContext:
        """The same workspace and sandbox, approvals forced non-interactive."""
        return attrs.evolve(self, approval="never", ask_permission=None)


def sandbox_policy(
    mode: str, network_access: bool = False, writable_roots: tuple[str, ...] = (),
    exclude_tmpdir_env_var: bool = False, exclude_slash_tmp: bool = False,
) -> dict[str, Any]:
    """A sandbox mode in Codex's `sandbox_policy` shape (what its `turn_context` needs)."""
    if mode != "workspace-write":
        return {"type": mode}
    return {"type": mode, "writable_roots": list(writable_roots),
            "network_access": network_access, "exclude_tmpdir_env_var": exclude_tmpdir_env_var,
            "exclude_slash_tmp": exclude_slash_tmp}
