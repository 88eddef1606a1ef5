"""SessionTree: what a whole tree of sessions shares, owned in one place (one per root).

Limits are counted over the tree, so the running count lives here rather than in any
one manager; the profile namespace and the tool definitions built from it are the same
for every session of the tree, so they are built once. (Budgets will live here next.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from attrs import define, field

from subsessions.config import SessionConfig
from subsessions.errors import ChildLimitReached, DepthLimitReached
from subsessions.profiles import LoadedProfile, Profile, profile_namespace
from subsessions.specs import tool_specs

Specs = tuple[dict[str, Any], ...]


@define(eq=False)
class SessionTree:
    config: SessionConfig  # the root's: limits, custom agents, the host's handlers and hooks
    _loaded: Mapping[str, LoadedProfile]
    _running: int = field(default=0, init=False)
    _profiles: dict[str, Profile] | None = field(default=None, init=False)
    _subsession_specs: Specs | None = field(default=None, init=False)
    # tool specs by (config id, profile, depth), with the config kept alive
    _spec_cache: dict[tuple[int, Profile | None, int], tuple[object, Specs]] = field(
        factory=dict, init=False
    )

    def __repr__(self) -> str:
        return (f"<SessionTree running={self._running}/{self.max_children} "
                f"max_depth={self.max_depth}>")

    @property
    def max_depth(self) -> int:
        return self.config.max_depth

    @property
    def max_children(self) -> int:
        return self.config.max_children

    @property
    def running(self) -> int:
        """Children running anywhere in the tree."""
        return self._running

    def check_room(self, parent_depth: int) -> None:
        """Refuse a child below the depth limit or beyond the tree's running limit."""
        if parent_depth >= self.max_depth:
            raise DepthLimitReached(self.max_depth)
        if self._running >= self.max_children:
            raise ChildLimitReached(self.max_children)

    def child_started(self) -> None:
        self._running += 1

    def child_ended(self) -> None:
        self._running -= 1

    def profiles(self) -> dict[str, Profile]:
        """The profiles children of this tree can be spawned from, by name (built once)."""
        if self._profiles is None:
            self._profiles = profile_namespace(self._loaded, self.config.custom_agents)
        return self._profiles

    def subsession_specs(self) -> Specs:
        """The sub-session tools' definitions, listing this tree's profiles."""
        if self._subsession_specs is None:
            self._subsession_specs = tool_specs(self.profiles())
        return self._subsession_specs

    def specs_for(
        self, config: object, profile: Profile | None, depth: int, build: Callable[[], Specs]
    ) -> Specs:
        """What a session's model is offered: the same for siblings spawned from one
        profile, so built once per (config, profile, depth) in the tree."""
        key = (id(config), profile, depth)
        cached = self._spec_cache.get(key)
        if cached is not None and cached[0] is config:
            return cached[1]
        specs = build()
        self._spec_cache[key] = (config, specs)
        return specs
