"""A remote child's spec: what of a child and its root travels to a shard
with it; the root's callables stay here and are named (hooks, handlers) instead."""

from __future__ import annotations

from attrs import evolve

from subsessions._core.conversation import Child
from subsessions.children import CANCEL
from subsessions.config import BUILTIN_TOOL_NAMES
from subsessions.profiles import Profile
from subsessions.ray import host
from subsessions.ray.wire import ChildSpec, RootSpec, ToolSpec


def child_spec(child: Child, prompt: str, first: bool) -> ChildSpec:
    """What of a remote child (and of its root) travels to its shard: its config without the
    host's callables, its tools by kind, and its counters, budgets and inbox so far."""
    parent = child.parent
    assert parent is not None
    root = parent.config
    config = evolve(child.config, tools=(), permission_handler=None, hooks=None,
                    user_input_handler=None, mcp_servers={})
    context = child.tool_context
    tools = tuple(
        ToolSpec(t.name, t.description, t.parameters, t.requires_permission,
                 "builtin" if t.name in BUILTIN_TOOL_NAMES and context is not None
                 else "deferred" if t.handler is None else "host")
        for t in child.tools()
    )
    hooks = root.hooks
    return ChildSpec(
        session_id=child.session_id, rollout_path=child.rollout_path,
        started_at=child.started_at, call_id=child.call_id or "", prompt=prompt,
        source=child.source if isinstance(child.source, dict) else {},
        profile=child.profile or Profile(name="custom"), config=config, tools=tools,
        tool_context=context,
        root=RootSpec(
            session_id=parent.session_id, max_depth=root.max_depth,
            max_children=root.max_children, custom_agents=root.custom_agents,
            hooks=tuple(n for n in host.HOOK_NAMES if getattr(hooks, n, None) is not None),
            permission_handler=root.permission_handler is not None,
            user_input_handler=root.user_input_handler is not None,
            notify_on_child_end=root.notify_on_child_end,
        ),
        relay_events=child.heard,
        cancel_first=child.stop is CANCEL,
        budget_first=None if child.budget_stop is None else (child.budget_stop.kind,
                                                             child.budget_stop.limit),
        budget=child.budget,
        inbox=tuple(child.inbox),
        elapsed=child.meter.elapsed(),
        follow_up=not first,
        history=tuple(child.history) if first else (),
        output_schema=child.typed.schema if first and child.typed is not None else None,
        token_usage=child.token_usage,
        counts=(child.turns, child.tool_calls),
        spent=(child.meter.turns, child.meter.tokens),
        tree_budget=parent.root.budget,
        tree_spent=(parent.root.meter.turns, parent.root.meter.tokens),
        trace=None if child.runtime.tracer is None else child.runtime.tracer.carrier(),
    )
