"""Spawning: the kits a session's children are made of, the root's consent to each spawn,
and what a forked child starts from."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from subsessions._core.dispatch import call_maybe_async
from subsessions._core.kit import Kit, child_config, narrowed
from subsessions.budget import Budget
from subsessions.config import SessionConfig, as_child_config
from subsessions.errors import InvalidArguments, SpawnDenied, error_text
from subsessions.items import Item
from subsessions.profiles import Profile, resolve_profile
from subsessions.tools.worktrees import Worktree

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

    def in_worktree(self, kit: Kit, worktree: Worktree) -> Kit:
        """`kit` for one child in its own worktree: a kit of its own, whose cwd is the
        worktree and whose sandbox writes it (and what git writes for it) instead of the
        parent's cwd."""
        parent, profile = self._parent, kit.profile
        assert profile is not None  # a kit of a profile (the manager checks)
        context = parent.child_tool_context()
        if context is not None:
            context = narrowed(attrs.evolve(
                context, cwd=worktree.path, writable_roots=worktree.writable()[1:],
                read_only_paths=(*context.read_only_paths, *worktree.read_only())), profile)
        config = child_config(parent.kit, profile, parent.model, worktree.path, context)
        return Kit.of(config, profile, context, parent.tree, parent.depth + 1)

    def _new(self, profile: Profile, config: SessionConfig) -> Kit:
        parent = self._parent
        context = parent.child_tool_context()  # its children's too: narrowed as its own
        return Kit.of(config, profile, context and narrowed(context, profile), parent.tree,
                      parent.depth + 1)


async def consent(parent: Conversation, kit: Kit, prompt: str, budget: Budget | None) -> None:
    """The tree's root's `on_spawn` hook: a `deny` answer refuses the
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


ISOLATIONS = ("worktree",)


def isolation_of(value: object, tool: str) -> str | None:
    """`isolation` as given: None (or "none") for the parent's workspace, or
    "worktree"."""
    if value is None or value == "none":
        return None
    if value in ISOLATIONS:
        return str(value)
    raise InvalidArguments(tool, f'isolation: must be null, "none" or "worktree", '
                           f"not {value!r:.40}")


def forked_items(history: list[Item], turns: int | str, call_id: str) -> tuple[Item, ...]:
    """What a forked child starts from: the parent's conversation items of its last `turns`
    turns (a turn opens with a user message; the spawning one counts), without the spawning
    call, without a call that has no output yet (or an output without its call), and
    without developer or system messages (instructions are never copied)."""
    starts = [n for n, item in enumerate(history) if _role(item) == "user"]
    first = 0 if turns == "all" or not isinstance(turns, int) or len(starts) <= turns else (
        starts[-turns])
    items = history[first:]
    calls = {i.get("call_id") for i in items if i.get("type") == "function_call"}
    answered = {i.get("call_id") for i in items if i.get("type") == "function_call_output"}
    kept = calls & answered - {call_id}
    return tuple(item for item in items if _role(item) not in ("developer", "system") and (
        item.get("type") not in ("function_call", "function_call_output")
        or item.get("call_id") in kept))


def _role(item: Item) -> str | None:
    return item.get("role") if item.get("type", "message") == "message" else None
