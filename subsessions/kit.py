"""Kit: what a session's model and tools are made of, apart from any one run of it.

Siblings spawned from one profile under one parent share one kit (built once per parent
and profile), so a child holds one reference instead of a router and copies of its
parent's config; a top-level session has a kit of its own.
"""

from __future__ import annotations

from collections.abc import Mapping

from attrs import field, frozen

from subsessions.config import SessionConfig, Tool
from subsessions.handlers import ask_user, parent_message
from subsessions.profiles import Profile
from subsessions.tools.context import ToolContext
from subsessions.tree import SessionTree, Specs


@frozen(eq=False, repr=False)
class Kit:
    config: SessionConfig  # a child's: derived from its parent's and its profile
    profile: Profile | None  # the allowlist (None: a top-level session without one)
    tools: Mapping[str, Tool]  # by name: its host tools and built-in ones
    tool_context: ToolContext | None  # its built-in tools' workspace and policies
    tree: SessionTree
    depth: int  # of the sessions made with it
    _specs: list[Specs] = field(factory=list, init=False)  # built at the first model call

    def __repr__(self) -> str:
        name = self.profile.name if self.profile is not None else "-"
        return f"<Kit {name} depth={self.depth} tools={len(self.tools)}>"

    @property
    def fallback_models(self) -> tuple[str, ...]:
        return self.profile.fallback_models if self.profile is not None else ()

    def allows(self, tool_name: str) -> bool:
        """Whether the profile's allowlist admits a tool (no profile admits all)."""
        return self.profile is None or self.profile.allows(tool_name)

    def specs(self) -> Specs:
        """What the model is offered: its tools, `ask_user` when the root's host answers
        questions (never gated by the allowlist), the sub-session tools above the depth
        limit and a child's `send_parent_message` (at any depth), each as the allowlist
        admits. Built once, at the first model call."""
        if not self._specs:
            tree = self.tree
            specs = tuple(t.spec() for t in self.tools.values())
            if tree.config.user_input_handler is not None:
                specs += (ask_user.SPEC,)
            if self.depth < tree.max_depth:
                specs += tuple(s for s in tree.subsession_specs() if self.allows(s["name"]))
            if self.depth >= 1 and self.allows(parent_message.NAME):
                specs += (parent_message.SPEC,)
            self._specs.append(specs)
        return self._specs[0]
