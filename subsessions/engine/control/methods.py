"""The control methods, answered against an engine through its public surface only: its
top-level sessions, their managers (`children`, `cancel_child`, `send_message`) and the
runtime's task ownership.

`sessions.list` is the engine's live tree; `sessions.cancel` and `sessions.send` act on
any session of it as the engine's own host would (a child: as its parent's
`cancel_session`/`send_message`; a top-level session: its running task is cancelled, or
the message is queued into it, or starts a follow-up task when it is idle).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Protocol

from attrs import frozen

from subsessions._core.manager import SubsessionManager
from subsessions._core.runtime import Runtime
from subsessions._core.session import Session
from subsessions._core.state import Phase
from subsessions.children import ChildInfo
from subsessions.engine.control.rpc import INVALID_PARAMS, SESSION_ERROR, UNKNOWN_SESSION, RpcError
from subsessions.errors import SessionBusy, SubsessionError, UnknownSession, echo
from subsessions.events import SessionEvent

log = logging.getLogger("subsessions.engine.control")
MAX_MESSAGE = 256 * 1024  # characters of one sent message
_LAST = 200  # characters of a last message in a listing
_TRIES = 100  # a follow-up waits for this many other tasks of its session at most
_ENDINGS = ("session.idle", "session.error")  # every task announces its ending with one


class Host(Protocol):
    """What the methods need of an engine."""

    @property
    def runtime(self) -> Runtime: ...
    def sessions(self) -> list[Session]: ...


@frozen
class Place:
    """Where a session of the engine is: top-level (`manager` None) or a child."""

    session: Session | None  # a top-level session
    info: ChildInfo | None  # a child's snapshot
    manager: SubsessionManager | None  # the child's parent's manager
    parent_id: str | None
    depth: int

    @property
    def session_id(self) -> str:
        if self.info is not None:
            return self.info.session_id
        assert self.session is not None
        return self.session.session_id


def places(host: Host) -> Iterator[Place]:
    """Every session of the engine, parents before their children."""
    for top in host.sessions():
        yield Place(top, None, None, None, 0)
        family = top.spawned
        if family is not None:
            members = {m.session_id: m for m in family.tree()}
            yield from _children(family, top.session_id, 1, members)


def _children(manager: SubsessionManager, parent_id: str, depth: int,
              members: dict[str, Any]) -> Iterator[Place]:
    for info in manager.children():
        yield Place(None, info, manager, parent_id, depth)
        member = members.get(info.session_id)
        below = getattr(member, "spawned", None)
        if isinstance(below, SubsessionManager):
            yield from _children(below, info.session_id, depth + 1, members)


def find(host: Host, session_id: str) -> Place:
    for place in places(host):
        if place.session_id == session_id:
            return place
    raise RpcError(UNKNOWN_SESSION, f"unknown session: {echo(session_id)} (not a session "
                   "of this engine)", {"sessionId": session_id})


def entry(place: Place, now: float) -> dict[str, Any]:
    """One session of `sessions.list`."""
    if place.info is not None:
        shown = place.info.listing(now)
        status, kind, model = shown["status"], shown["session_type"], place.info.model
        usage, seconds, last = shown["usage"], shown["seconds"], place.info.last_message
    else:
        assert place.session is not None
        top = place.session
        model, last = top.model, top.last_message
        status = "running" if top.phase is Phase.RUNNING else "idle"
        kind = top.agent_name or (top.source if isinstance(top.source, str) else "exec")
        usage, seconds = top.usage().as_dict(), round(max(0.0, now - top.started_at), 3)
    return {"sessionId": place.session_id, "parentId": place.parent_id, "depth": place.depth,
            "sessionType": kind, "model": model, "status": status, "usage": usage,
            "seconds": seconds, "lastMessage": None if last is None else last[:_LAST]}


# -- the methods -------------------------------------------------------------------------------
async def sessions_list(host: Host, params: dict[str, Any]) -> dict[str, Any]:
    _fields(params, set())
    now = time.time()
    return {"pid": os.getpid(), "sessions": [entry(p, now) for p in places(host)]}


async def sessions_cancel(host: Host, params: dict[str, Any]) -> dict[str, Any]:
    _fields(params, {"sessionId"})
    place = find(host, _session_id(params))
    if place.manager is not None and place.info is not None:
        return {"cancelled": await place.manager.cancel_child(place.info.session_id)}
    assert place.session is not None
    running = host.runtime.cancel_top_tasks(place.session.session_id)
    if running:  # each aborts its children first; its ending is written when it is done
        await asyncio.wait(running)
    return {"cancelled": bool(running)}


async def sessions_send(host: Host, params: dict[str, Any]) -> dict[str, Any]:
    _fields(params, {"sessionId", "message", "prompt"})
    session_id = _session_id(params)
    message = params.get("message", params.get("prompt"))
    if "message" in params and "prompt" in params:
        raise RpcError(INVALID_PARAMS, "give message or prompt, not both")
    if not isinstance(message, str) or not message.strip():
        raise RpcError(INVALID_PARAMS, "message must be a non-empty string")
    if len(message) > MAX_MESSAGE:
        raise RpcError(INVALID_PARAMS, f"message is longer than {MAX_MESSAGE} characters")
    place = find(host, session_id)
    if place.manager is not None and place.info is not None:
        return {"delivered": await place.manager.send_message(session_id, message)}
    assert place.session is not None
    top = place.session
    if top.taking_messages and await top.take_message(message):
        return {"delivered": "queued"}  # its task reads it before its next model call
    host.runtime.spawn_task(_follow_up(top, message), f"subsessions-control-{session_id}")
    return {"delivered": "started"}


async def _follow_up(session: Session, message: str) -> None:
    """A top-level session's next task, started from the socket once the task it runs (one
    past reading messages, writing its ending) has ended; its ending is in its rollout and
    events, as any task's."""
    for _ in range(_TRIES):
        try:
            await session.send_and_wait(message)
            return
        except SessionBusy:
            await _task_ended(session)
        except SubsessionError as exc:
            log.info("a task sent through the control socket to %s failed: %s",
                     session.session_id, exc)
            return
    log.warning("a message for %s found it busy %d times: dropped", session.session_id, _TRIES)


async def _task_ended(session: Session) -> None:
    """Until the session's running task has announced its ending (its phase changes in
    the same step, before this wakes)."""
    ended = asyncio.Event()

    def on_event(event: SessionEvent) -> None:
        if event.session_id == session.session_id and event.type in _ENDINGS:
            ended.set()

    off = session.on(on_event)
    try:
        if session.phase is Phase.RUNNING:
            await ended.wait()
    finally:
        off()


METHODS: dict[str, Callable[[Host, dict[str, Any]], Awaitable[dict[str, Any]]]] = {
    "sessions.list": sessions_list,
    "sessions.cancel": sessions_cancel,
    "sessions.send": sessions_send,
}


async def call(host: Host, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """Answer one request; the engine's refusals become JSON-RPC errors."""
    try:
        return await METHODS[method](host, params)
    except UnknownSession as exc:
        raise RpcError(UNKNOWN_SESSION, str(exc), {"sessionId": exc.session_id}) from None
    except SubsessionError as exc:
        if isinstance(exc, RpcError):
            raise
        raise RpcError(SESSION_ERROR, str(exc)) from None


def _fields(params: dict[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(params) - allowed)
    if extra:
        raise RpcError(INVALID_PARAMS, f"unexpected field {echo(str(extra[0]))}")


def _session_id(params: dict[str, Any]) -> str:
    session_id = params.get("sessionId")
    if not isinstance(session_id, str) or not session_id:
        raise RpcError(INVALID_PARAMS, "sessionId must be a session id (a string)")
    return session_id
