"""Resume and fork sessions from their rollouts.

Resuming appends to the same file (its first `session_meta` stays) and continues
the conversation from the history the rollout holds; forking starts a new file
whose `session_meta` names `forked_from_id`. Either way the session knows how each
of its children ended, from the children's own rollouts, and can wait for them.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from subsessions.config import SessionConfig
from subsessions.manager import Cancelled, ChildState, Done, Failed
from subsessions.models.base import TokenUsage
from subsessions.profiles import Profile
from subsessions.rollouts import Rollout, find_rollout, list_rollouts, read_rollout

if TYPE_CHECKING:
    from subsessions.engine import Engine
    from subsessions.session import Session


def locate(home: Path, id_or_path: str | os.PathLike[str]) -> str:
    """A rollout path from a path, an id, or a unique prefix of an id."""
    text = os.fspath(id_or_path)
    if text.endswith(".jsonl") or os.sep in text:
        return text
    return str(find_rollout(home, text))


def _config(rollout: Rollout, base: SessionConfig | None) -> SessionConfig:
    meta = rollout.meta
    base = base or SessionConfig()
    model = meta.get("model")
    cwd = meta.get("cwd")
    instructions = meta.get("instructions")
    return SessionConfig(
        model=base.model or (model if isinstance(model, str) else None),
        instructions=base.instructions or (instructions if isinstance(instructions, str) else ""),
        tools=base.tools, custom_agents=base.custom_agents,
        permission_handler=base.permission_handler, hooks=base.hooks,
        user_input_handler=base.user_input_handler,
        cwd=base.cwd or (cwd if isinstance(cwd, str) else None),
        max_depth=base.max_depth, max_children=base.max_children, max_turns=base.max_turns,
        notify_on_child_end=base.notify_on_child_end,
    )


def _usage(rollout: Rollout) -> TokenUsage:
    counts = rollout.events("token_count")
    total = (counts[-1].get("info") or {}).get("total_token_usage", {}) if counts else {}
    return TokenUsage(int(total.get("input_tokens", 0)), int(total.get("output_tokens", 0)))


def _ending(rollout: Rollout) -> ChildState:
    status = rollout.status
    if status == "completed":
        return Done(rollout.last_agent_message)
    if status == "cancelled":
        return Cancelled()
    if status == "failed":
        errors = rollout.events("error")
        return Failed(str(errors[-1].get("message", "failed")) if errors else "failed")
    return Failed(f"{status}: the process that ran it ended before it finished")


def _ended_at(rollout: Rollout) -> float | None:
    if not rollout.records:
        return None
    stamp = str(rollout.records[-1].get("timestamp", ""))
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _adopt_children(engine: Engine, session: Session, parent_id: str) -> None:
    from subsessions.session import Session

    for summary in list_rollouts(engine.home, parent=parent_id):
        try:
            child_rollout = read_rollout(summary.path)
        except Exception:  # unreadable: it is listed as such by `rollouts list`
            continue
        meta = child_rollout.meta
        child = Session(
            engine, _config(child_rollout, None), parent=session,
            profile=Profile(name=str(meta.get("session_type") or "custom")),
            source=meta.get("source", "exec"),
            resumed=(child_rollout.session_id, child_rollout.path),
        )
        child.token_usage = _usage(child_rollout)
        session.subsessions.adopt_ended(child, _ending(child_rollout), _ended_at(child_rollout))


async def reopen(
    engine: Engine,
    id_or_path: str | os.PathLike[str],
    *,
    fork: bool,
    config: SessionConfig | None = None,
) -> Session:
    """The session of a rollout, registered as a top-level session of `engine`."""
    from subsessions.session import Session

    path = locate(engine.home, id_or_path)
    rollout = read_rollout(path)
    config = _config(rollout, config)
    if fork:
        session = Session(engine, config, source="exec")
        session.forked_from = rollout.session_id
        session.write_meta()
    else:
        source: Any = rollout.meta.get("source", "exec")
        session = Session(engine, config, source=source, resumed=(rollout.session_id, path))
    items = rollout.response_items()
    session.history.extend(items)
    session.token_usage = _usage(rollout)
    if fork:
        for item in items:
            session.recorder.record("response_item", item)
    note = f"{'forked from' if fork else 'resumed'} {rollout.session_id} with {len(items)} items"
    if rollout.skipped:
        lines = ", ".join(f"{s.line} ({s.reason})" for s in rollout.skipped[:20])
        note += f"; skipped unreadable lines: {lines}"
    session.recorder.event({"type": "background_event", "message": note})
    if not fork:
        _adopt_children(engine, session, rollout.session_id)
    engine.adopt(session)
    session.resume_report = note
    return session
