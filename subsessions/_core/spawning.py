"""Spawning: what a children manager needs of the session that owns it and of its children
(`Member`), the kits its children are made of, and the root's consent to each spawn.

The manager is typed against `Member`, never against `Session`, so the session module sits
above it (it builds sessions; the manager only asks for them).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Protocol

from subsessions._core.child import ChildLife, Settle
from subsessions._core.dispatch import Caller, call_maybe_async
from subsessions._core.kit import Kit
from subsessions._core.services import Services
from subsessions._core.tree import SessionTree
from subsessions.budget import Budget
from subsessions.config import SessionConfig, Tool, as_child_config
from subsessions.errors import InvalidArguments, SpawnDenied, error_text
from subsessions.profiles import Profile, resolve_profile
from subsessions.rollouts.recorder import RolloutRecorder
from subsessions.tools.context import ToolContext
from subsessions.usage import Usage


class Family(Protocol):
    """A member's own children, as far as its parent's manager reads them."""

    def tree(self) -> list[Member]: ...


class Member(Caller, Protocol):
    """What the manager needs of the session that owns it and of the children it asks for."""

    depth: int
    model: str
    @property
    def is_child(self) -> bool: ...
    @property
    def ended(self) -> bool: ...  # a child whose one task has written its ending
    @property
    def wrote_meta(self) -> bool: ...  # its rollout has its session_meta
    @property
    def runtime(self) -> Services: ...
    tree: SessionTree
    recorder: RolloutRecorder
    @property
    def rollout_path(self) -> str: ...
    @property
    def spawned(self) -> Family | None: ...  # its children, if it ever had any
    @property
    def budget(self) -> Budget | None: ...
    taking_messages: bool

    async def take_message(self, message: str) -> bool: ...
    async def flush_durable(self) -> None: ...

    def tools(self) -> tuple[Tool, ...]: ...
    def usage(self, include_children: bool = False) -> Usage: ...
    def remote_usages(self) -> Iterable[Usage]: ...  # of descendants run by another process
    def cancel_task(self) -> None: ...
    def count_spent(self, spent: tuple[int, int]) -> None: ...  # a shard's meter's
    def write_meta(self) -> None: ...
    def close_events(self) -> None: ...  # it has ended: its streams end
    def release(self) -> None: ...
    def child_config(self, profile: Profile) -> SessionConfig: ...
    def child_tool_context(self) -> ToolContext | None: ...
    def new_child(self, session_id: str, kit: Kit, call_id: str, budget: Budget | None,
                  on_ended: Settle, withdraw: Callable[[], None] | None
                  ) -> ChildLife[Kid]: ...
    def wake(self) -> None: ...


class Kid(Member, Protocol):
    """What the manager needs of a child besides its life (`ChildLife`)."""

    @property
    def inbox(self) -> list[str]: ...  # messages it reads before its next model call
    def hand_over_head(self) -> None: ...
    def prepare_follow_up(self) -> None: ...
    def run_child(self, prompt: str) -> Coroutine[Any, Any, str | None]: ...


class Kits:
    """What children spawned under one parent are made of: one kit per profile for the
    siblings (a host's SessionConfig is used as given)."""

    __slots__ = ("_kits", "_parent")

    def __init__(self, parent: Member) -> None:
        self._parent = parent
        self._kits: dict[str | Profile, Kit] = {}

    def get(self, profile: str | Profile | SessionConfig) -> Kit:
        parent = self._parent
        if isinstance(profile, SessionConfig):
            return self._new(*as_child_config(profile, parent.model, parent.cwd))
        if not isinstance(profile, str | Profile):
            raise InvalidArguments(
                "spawn_child", "profile must be a profile name, a Profile or a SessionConfig"
            )
        kit = self._kits.get(profile)
        if kit is None:
            chosen = resolve_profile(profile, parent.tree.profiles())
            # persona and memory stay out in derive_config
            kit = self._kits[profile] = self._new(chosen, parent.child_config(chosen))
        return kit

    def _new(self, profile: Profile, config: SessionConfig) -> Kit:
        parent = self._parent
        return Kit.of(config, profile, parent.child_tool_context(), parent.tree,
                      parent.depth + 1)


async def consent(parent: Member, kit: Kit, prompt: str, budget: Budget | None) -> None:
    """The tree's root's `on_spawn` hook (DESIGN 3.11): a `deny` answer refuses the
    spawn; a hook that fails denies with its error's text (consent was not given)."""
    hooks = parent.tree.config.hooks
    hook = hooks.on_spawn if hooks is not None else None
    if hook is None:
        return
    data = {
        "session_id": parent.session_id,
        "session_type": kit.profile.name if kit.profile is not None else "custom",
        "prompt": prompt,
        "budget": None if budget is None else budget.as_dict(),
        "depth": kit.depth,
        "running": parent.tree.running,
        "queued": parent.tree.queued,
    }
    try:
        answer = await call_maybe_async(hook, data)
    except Exception as exc:  # no consent: the spawn is refused, with the hook's error
        raise SpawnDenied(error_text(exc)) from exc
    if isinstance(answer, dict) and answer.get("decision") == "deny":
        raise SpawnDenied(str(answer.get("reason") or "denied by a hook"))
