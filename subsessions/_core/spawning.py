"""Spawning: the kits a session's children are made of, and the root's consent to each
spawn."""

from __future__ import annotations

from typing import TYPE_CHECKING

from subsessions._core.dispatch import call_maybe_async
from subsessions._core.kit import Kit
from subsessions.budget import Budget
from subsessions.config import SessionConfig, as_child_config
from subsessions.errors import InvalidArguments, SpawnDenied, error_text
from subsessions.profiles import Profile, resolve_profile

if TYPE_CHECKING:  # a name only: sessions are made above
    from subsessions._core.conversation import Conversation


class Kits:
    """What children spawned under one parent are made of: one kit per profile for the
    siblings (a host's SessionConfig is used as given)."""

    __slots__ = ("_kits", "_parent")

    def __init__(self, parent: Conversation) -> None:
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


async def consent(parent: Conversation, kit: Kit, prompt: str, budget: Budget | None) -> None:
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
