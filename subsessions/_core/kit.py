"""Kit: what a session's model and tools are made of, apart from any one run of it.

Siblings spawned from one profile under one parent share one kit (built once per parent
and profile), so a child holds one reference instead of a router and copies of its
parent's config; a top-level session has a kit of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import attrs
from attrs import field, frozen

from subsessions._core.specs import ASK_USER_SPEC, PARENT_MESSAGE_SPEC
from subsessions._core.tree import SessionTree, Specs
from subsessions.config import (
    BUILTIN_TOOL_NAMES,
    PARENT_MESSAGE,
    SessionConfig,
    Tool,
    derive_config,
)
from subsessions.profiles import Profile
from subsessions.tools import ToolContext, builtin_tools
from subsessions.tools.context import AskPermission


@frozen(eq=False, repr=False)
class Kit:
    config: SessionConfig  # a child's: derived from its parent's and its profile
    profile: Profile | None  # the allowlist (None: a top-level session without one)
    tools: Mapping[str, Tool]  # by name: its host tools and built-in ones
    tool_context: ToolContext | None  # its built-in tools' workspace and policies
    tree: SessionTree
    depth: int  # of the sessions made with it
    _specs: list[Specs] = field(factory=list, init=False)  # built at the first model call

    @classmethod
    def of(cls, config: SessionConfig, profile: Profile | None, tool_context: ToolContext | None,
           tree: SessionTree, depth: int) -> Kit:
        """A kit of `config`'s own tools (a child's: new, resumed, or a shard's)."""
        return cls(config, profile, {t.name: t for t in config.tools}, tool_context, tree, depth)

    def __repr__(self) -> str:
        name = self.profile.name if self.profile is not None else "-"
        return f"<Kit {name} depth={self.depth} tools={len(self.tools)}>"

    @property
    def fallback_models(self) -> tuple[str, ...]:
        return self.profile.fallback_models if self.profile is not None else ()

    @property
    def reasoning_effort(self) -> str | None:
        return self.profile.reasoning_effort if self.profile is not None else None

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
                specs += (ASK_USER_SPEC,)
            if self.depth < tree.max_depth:
                specs += tuple(s for s in tree.subsession_specs() if self.allows(s["name"]))
            if self.depth >= 1 and self.allows(PARENT_MESSAGE):
                specs += (PARENT_MESSAGE_SPEC,)
            self._specs.append(specs)
        return self._specs[0]


def own_kit(config: SessionConfig, profile: Profile | None, tree: SessionTree, cwd: str,
            home: Path, ask_permission: AskPermission) -> Kit:
    """A top-level session's kit: its built-in tools bound to its own workspace and its
    host's permission handler (`ask_permission`)."""
    tools = config.tools
    context = None
    if config.builtin_tools:
        context = ToolContext(
            cwd=cwd, sandbox=config.sandbox, network_access=config.network_access,
            read_only_paths=(str(home),), approval=config.approval,
            env_policy=config.env_policy, max_processes=config.max_processes,
            ask_permission=ask_permission,
        )
        tools += builtin_tools(context, _builtin_names(config))
    return Kit(config, profile, {t.name: t for t in tools}, context, tree, 0)


def child_config(kit: Kit, profile: Profile, model: str, cwd: str,
                 context: ToolContext | None) -> SessionConfig:
    """A child's config under a session of `kit` (`derive_config`); built-in tools are made
    anew for the child, bound to its non-interactive `context` (read-only for a profile
    that asks for it: a profile narrows the sandbox, never widens it)."""
    builtins: tuple[Tool, ...] = ()
    if context is not None:
        context = narrowed(context, profile)
        names = [name for name in kit.tools if name in BUILTIN_TOOL_NAMES]
        builtins = builtin_tools(context, names)
    return derive_config(kit.config, profile, model=model, cwd=cwd, builtins=builtins)


def _builtin_names(config: SessionConfig) -> tuple[str, ...] | None:
    chosen = config.builtin_tools
    return None if chosen is True else tuple(chosen or ())


def narrowed(context: ToolContext, profile: Profile) -> ToolContext:
    """`context` as a child of `profile` gets it: read-only when the profile says so."""
    if profile.sandbox == "read-only" and context.sandbox != "read-only":
        return attrs.evolve(context, sandbox="read-only")
    return context
