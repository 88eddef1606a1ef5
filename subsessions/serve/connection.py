"""One host connection: the Copilot runtime's JSON-RPC methods over one engine.

A connection sees, drives and deletes only the sessions it created or resumed, and names
them by full id only (`access`, the wires' one rule:
isolation between hosts); when it goes away, they are closed and their running trees
cancelled. With a connection token (TCP), nothing but `connect` and `ping` is served
before `connect` has presented it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import os
import time
from collections.abc import Callable
from typing import Any

from attrs import define, field

from subsessions._version import __version__
from subsessions.engine import access
from subsessions.engine.facade import Engine
from subsessions.engine.instructions import with_base_instructions
from subsessions.errors import SessionBusy, UnknownSession
from subsessions.serve import history
from subsessions.serve.options import session_options
from subsessions.serve.peer import INVALID_PARAMS, INVALID_REQUEST, Peer, RpcError
from subsessions.serve.served import HostBridge, ServedSession
from subsessions.settings import Settings

PROTOCOL_VERSION = 3
SOURCE = "cli"  # served sessions are the Copilot CLI runtime's own kind (README)
SESSION_ERROR = -32000
_OPEN = frozenset({"connect", "ping"})


@define(eq=False)
class Connection:
    engine: Engine
    settings: Settings
    peer: Peer
    token: str | None = None  # what `connect` must present (TCP with a token)
    on_shutdown: Callable[[], None] = lambda: None
    _sessions: dict[str, ServedSession] = field(factory=dict, init=False)
    _trusted: bool = field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        self._trusted = self.token is None
        methods = {
            "connect": self._connect, "ping": self._ping, "status.get": self._status,
            "session.create": self._create, "session.resume": self._resume,
            "session.send": self._send, "session.sendAndWait": self._send_and_wait,
            "session.abort": self._abort, "session.list": self._list,
            "session.getMetadata": self._metadata, "session.detach": self._detach,
            "session.delete": self._delete, "runtime.shutdown": self._shutdown,
            "session.getMessages": self._messages,
            "session.tools.handlePendingToolCall": self._tool_answer,
            "session.permissions.handlePendingPermissionRequest": self._permission_answer,
        }
        self.peer.methods.update({name: self._guard(name, f) for name, f in methods.items()})

    def _guard(self, name: str, method: Any) -> Any:
        async def guarded(params: dict[str, Any]) -> Any:
            if not self._trusted and name not in _OPEN:
                raise RpcError(INVALID_REQUEST, "call connect with the connection token first")
            return await method(params)

        return guarded

    async def close(self) -> None:
        """The host is gone: its sessions are closed and their running trees cancelled."""
        for session_id in list(self._sessions):
            await self._forget(session_id)

    # -- handshake --------------------------------------------------------------------------
    async def _connect(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.token is not None:
            given = params.get("token")
            if not isinstance(given, str) or not hmac.compare_digest(given, self.token):
                raise RpcError(INVALID_REQUEST, "connection token rejected")
            self._trusted = True
        return {"ok": True, "protocolVersion": PROTOCOL_VERSION, "version": __version__}

    async def _ping(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"message": f"pong: {params.get('message') or ''}",
                "timestamp": int(time.time() * 1000), "protocolVersion": PROTOCOL_VERSION}

    async def _status(self, _params: dict[str, Any]) -> dict[str, Any]:
        return {"version": __version__, "protocolVersion": PROTOCOL_VERSION}

    async def _shutdown(self, _params: dict[str, Any]) -> dict[str, Any]:
        asyncio.get_running_loop().call_soon(self.on_shutdown)  # after this answer is sent
        return {}

    # -- sessions ---------------------------------------------------------------------------
    async def _create(self, params: dict[str, Any]) -> dict[str, Any]:
        session_id = _session_id(params)
        bridge = HostBridge(self.peer, session_id)
        options = session_options(params, bridge, self.settings, self.engine.cwd)
        session = await self.engine.create_session(with_base_instructions(options.config),
                                                   source=SOURCE,
                                                   session_id=session_id)
        return self._serve(session, bridge, options, resumed=False)

    async def _resume(self, params: dict[str, Any]) -> dict[str, Any]:
        session_id = _session_id(params)
        if session_id in self._sessions:
            raise SessionBusy(session_id, "is already open on this connection")
        path = access.at_rest(self.engine, session_id)  # never a path or a prefix (README)
        bridge = HostBridge(self.peer, session_id)
        options = session_options(params, bridge, self.settings, self.engine.cwd)
        session = await self.engine.resume_session(path, options.config)
        return self._serve(session, bridge, options, resumed=True)

    def _serve(self, session: Any, bridge: HostBridge, options: Any, resumed: bool
               ) -> dict[str, Any]:
        served = ServedSession(session, self.peer, options.agents, options.descriptions)
        bridge.served = served
        self._sessions[session.session_id] = served
        served.start(resumed)
        if not resumed:
            self._lifecycle("session.created", session.session_id, session.started_at)
        return {"sessionId": session.session_id, "workspacePath": None}

    def _lifecycle(self, kind: str, session_id: str, started: float | None = None) -> None:
        """`session.lifecycle`: every SDK listens for it unasked; a connection is told of its
        own sessions only (`access`: no other connection learns their ids)."""
        note: dict[str, Any] = {"type": kind, "sessionId": session_id}
        if started is not None:
            note["metadata"] = _times(started)
        self.peer.notify("session.lifecycle", note)

    def _served(self, params: dict[str, Any]) -> ServedSession:
        return self._sessions[access.named(params.get("sessionId"), self._sessions)]

    async def _send(self, params: dict[str, Any]) -> dict[str, Any]:
        turn, _ = self._served(params).send(_prompt(params))
        return {"messageId": turn.message_id}

    async def _send_and_wait(self, params: dict[str, Any]) -> dict[str, Any]:
        turn, task = self._served(params).send(_prompt(params))
        await asyncio.wait((task,))
        if task.cancelled():
            raise RpcError(SESSION_ERROR, "the session was closed before the message ended")
        if turn.error is not None:
            raise RpcError(SESSION_ERROR, turn.error, {"completionEventId": turn.completion_id})
        return {"response": turn.last_answer, "aborted": turn.aborted,
                "completionEventId": turn.completion_id}

    async def _abort(self, params: dict[str, Any]) -> dict[str, Any]:
        self._served(params).abort()
        return {"success": True}

    async def _list(self, _params: dict[str, Any]) -> dict[str, Any]:
        return {"sessions": [_metadata(s) for s in self._sessions.values()]}

    async def _messages(self, params: dict[str, Any]) -> dict[str, Any]:
        session = self._served(params).session
        return {"events": history.replay(session.session_id, session.model, session.cwd,
                                         session.started_at, session.history)}

    async def _metadata(self, params: dict[str, Any]) -> dict[str, Any]:
        try:
            served = self._served(params)
        except UnknownSession:
            return {"session": None}
        return {"session": _metadata(served)}

    async def _detach(self, params: dict[str, Any]) -> dict[str, Any]:
        await self._forget(self._served(params).session_id)
        return {"success": True}

    async def _delete(self, params: dict[str, Any]) -> dict[str, Any]:
        session_id = _session_id(params)
        if session_id in self._sessions:
            await self._forget(session_id, delete=True)
        else:
            try:  # only by its full id, and only when no one holds it open
                path = access.at_rest(self.engine, session_id)
            except UnknownSession as exc:
                return {"success": False, "error": str(exc)}
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
        self._lifecycle("session.deleted", session_id)
        return {"success": True}

    async def _forget(self, session_id: str, delete: bool = False) -> None:
        served = self._sessions.pop(session_id)
        await served.close()
        with contextlib.suppress(UnknownSession):
            if delete:
                await self.engine.delete_session(session_id)
            else:
                await self.engine.destroy_session(session_id)

    # -- the host's answers -----------------------------------------------------------------
    async def _tool_answer(self, params: dict[str, Any]) -> dict[str, Any]:
        served = self._served(params)
        request_id = _text(params, "requestId")
        return {"success": served.answer_tool(request_id, params.get("result"),
                                              params.get("error"))}

    async def _permission_answer(self, params: dict[str, Any]) -> dict[str, Any]:
        served = self._served(params)
        return {"success": served.answer_permission(_text(params, "requestId"),
                                                    params.get("result"))}


def _text(params: dict[str, Any], key: str) -> str:
    value = params.get(key)
    if not isinstance(value, str) or not value:
        raise RpcError(INVALID_PARAMS, f"{key} must be a non-empty string")
    return value


def _session_id(params: dict[str, Any]) -> str:
    return _text(params, "sessionId")


def _prompt(params: dict[str, Any]) -> str:
    prompt = params.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise RpcError(INVALID_PARAMS, "prompt must be a non-empty string")
    return prompt


def _metadata(served: ServedSession) -> dict[str, Any]:
    session = served.session
    return {"sessionId": session.session_id, **_times(session.started_at), "isRemote": False,
            "context": {"cwd": session.cwd}}


def _times(started: float) -> dict[str, str]:
    def stamp(at: float) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))

    return {"startTime": stamp(started), "modifiedTime": stamp(time.time())}
