"""Resume and fork sessions from their rollouts.

Resuming appends to the same file (its first `session_meta` stays) and continues
the conversation from the history the rollout holds; forking starts a new file
whose `session_meta` names `forked_from_id`. Either way the session knows how each
of its children ended, from the children's own rollouts, and can wait for them.

This module rebuilds sessions given a `Runtime`; the engine checks its registry (is the
session open already, here or in another engine?) and registers what comes back.
"""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from typing import Any

from attrs import evolve, frozen

from subsessions._core.conversation import Child
from subsessions._core.runtime import Runtime
from subsessions._core.session import Session
from subsessions._core.state import Origin
from subsessions.budget import parse_budget
from subsessions.children import Cancelled, Done, Ending, Failed
from subsessions.config import SessionConfig
from subsessions.errors import RolloutError, SessionBusy, SubsessionError, echo
from subsessions.ids import is_session_id
from subsessions.models.base import TokenUsage
from subsessions.profiles import Profile
from subsessions.rollouts import Rollout, find_rollout, list_rollouts, read_rollout
from subsessions.rollouts.status import writer_claim
from subsessions.rollouts.summary import instructions_of
from subsessions.rollouts.values import optional_text, parse_stamp, text


def writer_pid(rollout: Rollout) -> object:
    """The pid that wrote the last task (its turn_context), else the session's."""
    for record in reversed(rollout.records):
        if record["type"] == "turn_context" and (claim := writer_claim(record)) is not None:
            return claim["pid"]
    return rollout.meta.get("pid")


def _ends_torn(path: str) -> bool:
    with open(path, "rb") as file:
        file.seek(0, os.SEEK_END)
        if file.tell() == 0:
            return False
        file.seek(-1, os.SEEK_END)
        return file.read(1) != b"\n"


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
    instructions = instructions_of(meta)
    return evolve(  # the caller's config, with what only the rollout knows filled in
        base,
        model=base.model or (model if isinstance(model, str) else None),
        instructions=base.instructions or (instructions if isinstance(instructions, str) else ""),
        cwd=base.cwd or (cwd if isinstance(cwd, str) else None),
    )


def _usage(rollout: Rollout, damaged: list[str]) -> TokenUsage:
    """The last running total; one that is not whole numbers counts as none, and is reported."""
    counts = rollout.events("token_count")
    info = counts[-1].get("info") if counts else None
    if info is None:  # no model call yet (Codex writes `info: null` then)
        return TokenUsage()
    total = info.get("total_token_usage") if isinstance(info, dict) else None
    keys = ("input_tokens", "output_tokens", "cached_input_tokens", "reasoning_output_tokens")
    numbers = tuple(total.get(k, 0) for k in keys) if isinstance(total, dict) else (None,)
    if not isinstance(total, dict) or not all(type(n) is int and n >= 0 for n in numbers):
        damaged.append(f"the token counts of {rollout.session_id} (counted as 0)")
        return TokenUsage()
    in_, out, cached, reasoning = numbers
    return TokenUsage(in_, out, cached, reasoning, estimated=total.get("estimated") is True)


def _ending(rollout: Rollout) -> Ending:
    status = rollout.status
    if status == "completed":
        return Done(rollout.last_agent_message)
    if status == "cancelled":
        return Cancelled()
    if status == "failed":
        errors = rollout.events("error")
        return Failed((text(errors[-1].get("message")) or "failed") if errors else "failed")
    if status == "running":
        return Failed("still running in another process; it cannot be waited for from here")
    return Failed(f"{status}: the process that ran it ended before it finished")


@frozen
class _Known:
    """A child as its rollout tells it, read before its parent is built."""

    rollout: Rollout
    origin: Origin
    ending: Ending
    ended_at: float | None


def _read_children(home: Path, parent_id: str, damaged: list[str]) -> list[_Known]:
    """Each child from its rollout; what of it is damaged is left out and reported."""
    known: list[_Known] = []
    for summary in reversed(list_rollouts(home, parent=parent_id)):  # oldest first
        try:
            child_rollout = read_rollout(summary.path)
        except RolloutError:  # unreadable: it is listed as such by `rollouts list`
            damaged.append(f"child {summary.session_id} (unreadable)")
            continue
        usage = _usage(child_rollout, damaged)
        started = parse_stamp(child_rollout.meta.get("timestamp"))
        ended = None
        if child_rollout.records:
            ended = parse_stamp(child_rollout.records[-1].get("timestamp"))
            if ended is None:
                damaged.append(f"when {child_rollout.session_id} ended (no timestamp)")
        origin = Origin(child_rollout.session_id, child_rollout.path, started_at=started,
                        token_usage=usage)
        known.append(_Known(child_rollout, origin, _ending(child_rollout), ended))
    return known


def _adopt_children(session: Session, known: list[_Known]) -> None:
    """Know each child that ended in an earlier run: it can be waited for."""
    for child in known:
        meta = child.rollout.meta
        source = meta.get("source")
        session.subsessions.adopt_ended(partial(
            Child.ended_earlier, _config(child.rollout, None), child.origin, session,
            Profile(name=optional_text(meta.get("session_type")) or "custom"),
            source if isinstance(source, str | dict) else "exec", child.ending,
            child.ended_at))


def queued_spawns(rollout: Rollout) -> list[dict[str, Any]]:
    """The spawns a session had queued that neither started nor were
    cancelled before its process ended: each with its id, profile, prompt, call, budget and
    the messages sent to it while it waited."""
    waiting: dict[str, dict[str, Any]] = {}
    for event in rollout.events("background_event"):
        message, queued, sent = event.get("message"), event.get("queued"), event.get("sent")
        if not isinstance(message, str):
            continue
        words = message.split()
        if message.startswith("queued child session ") and isinstance(queued, dict):
            waiting[words[3]] = {**queued, "messages": ()}
        elif message.startswith("message to queued child session ") and isinstance(sent, str):
            if words[5] in waiting:
                waiting[words[5]]["messages"] += (sent,)
        elif message.startswith("spawned child session "):
            waiting.pop(words[3], None)
        elif message.startswith("child session "):  # ... cancelled (or ended)
            waiting.pop(words[2], None)
    return [{"session_id": sid, **spawn} for sid, spawn in waiting.items()]


def requeue(session: Session, rollout: Rollout) -> None:
    """Queue again what `queued_spawns` finds (started at once when there is room); a
    spawn that cannot be read or whose profile is gone is reported, not restarted."""
    problems: list[str] = []
    known = {child.session_id for child in session.subsessions.children()}
    for spawn in queued_spawns(rollout):
        child_id = spawn["session_id"]
        if child_id in known:  # its rollout was made before the crash: it is known ended
            continue
        try:
            prompt, session_type = spawn.get("prompt"), spawn.get("session_type")
            if not is_session_id(child_id):  # never a path or a name of ours
                raise ValueError("not a session id")
            if not isinstance(prompt, str) or not isinstance(session_type, str):
                raise ValueError("no prompt or profile")
            session.subsessions.requeue(
                child_id, session_type, prompt, str(spawn.get("call_id", "")),
                parse_budget(spawn.get("budget"), "resume"), spawn["messages"])
        except (SubsessionError, ValueError) as exc:
            problems.append(f"queued child {echo(child_id)} ({exc})")
    if problems:
        session.recorder.event({"type": "background_event", "message":
                                "could not queue again: " + ", ".join(problems[:20])})


def load(home: Path, id_or_path: str | os.PathLike[str]) -> tuple[str, Rollout]:
    """The path and the rollout of a session to resume or fork."""
    path = locate(home, id_or_path)
    return path, read_rollout(path)


def check_resumable(rollout: Rollout) -> None:
    """A rollout another process is still writing cannot be resumed (two writers would
    interleave one file); it can be forked."""
    if rollout.status == "running" and writer_pid(rollout) != os.getpid():
        raise SessionBusy(rollout.session_id, "is still running in another process; "
                          "fork it instead")


def rebuild(
    runtime: Runtime, path: str, rollout: Rollout, *, fork: bool,
    config: SessionConfig | None = None,
) -> Session:
    """The session of a rollout (not registered anywhere: the engine does that)."""
    config = _config(rollout, config)
    items = rollout.response_items()
    damaged: list[str] = []
    usage = _usage(rollout, damaged)
    known = [] if fork else _read_children(runtime.home, rollout.session_id, damaged)
    note = f"{'forked from' if fork else 'resumed'} {rollout.session_id} with {len(items)} items"
    if rollout.skipped:
        lines = ", ".join(f"{s.line} ({s.reason})" for s in rollout.skipped[:20])
        note += f"; skipped unreadable lines: {lines}"
    if damaged:
        note += f"; skipped what was damaged: {', '.join(damaged[:20])}"
    if fork:
        session = Session.new(runtime, config, origin=Origin(
            history=tuple(items), token_usage=usage, forked_from=rollout.session_id,
            resume_report=note))
        session.write_meta()  # then the copied items, as a forked child's
    else:
        source: Any = rollout.meta.get("source", "exec")
        session = Session.resumed(runtime, config, Origin(
            rollout.session_id, path, history=tuple(items), token_usage=usage,
            resume_report=note), source=source)
        if _ends_torn(path):
            session.recorder.start_new_line()  # never glue a new line onto a torn one
        _adopt_children(session, known)
    session.recorder.event({"type": "background_event", "message": note})
    return session
