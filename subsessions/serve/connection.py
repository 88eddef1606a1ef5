"""One host connection: the Copilot runtime's JSON-RPC methods over one engine.

A connection sees, drives and deletes only the sessions it created or resumed (DESIGN 4,
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
from subsessions.engine import Engine
from subsessions.errors import SessionBusy, UnknownSession
from subsessions.instructions import with_base_instructions
from subsessions.rollouts.files import find_rollout
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
        bridge = HostBridge(self.peer, session_id)
        options = session_options(params, bridge, self.settings, self.engine.cwd)
        session = await self.engine.resume_session(session_id, options.config)
        return self._serve(session, bridge, options, resumed=True)

    def _serve(self, session: Any, bridge: HostBridge, options: Any, resumed: bool
               ) -> dict[str, Any]:
        served = ServedSession(session, self.peer, options.agents, options.descriptions)
        bridge.served = served
        self._sessions[session.session_id] = served
        served.start(resumed)
        return {"sessionId": session.session_id, "workspacePath": None}

    def _served(self, params: dict[str, Any]) -> ServedSession:
        session_id = params.get("sessionId")
        served = self._sessions.get(session_id) if isinstance(session_id, str) else None
        if served is None:
            raise UnknownSession(str(session_id)[:128])
        return served

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

    async def _metadata(self, params: dict[str, Any]) -> dict[str, Any]:
        served = self._sessions.get(str(params.get("sessionId")))
        return {"session": _metadata(served) if served is not None else None}

    async def _detach(self, params: dict[str, Any]) -> dict[str, Any]:
        await self._forget(self._served(params).session_id)
        return {"success": True}

    async def _delete(self, params: dict[str, Any]) -> dict[str, Any]:
        session_id = _session_id(params)
        if session_id in self._sessions:
            await self._forget(session_id, delete=True)
            return {"success": True}
        if self.engine.get_session(session_id) is not None:
            return {"success": False, "error": f"session {session_id} is open elsewhere"}
        try:
            path = find_rollout(self.engine.home, session_id)
        except UnknownSession as exc:
            return {"success": False, "error": str(exc)}
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
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
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(session.started_at))
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {"sessionId": session.session_id, "startTime": started, "modifiedTime": now,
            "isRemote": False, "context": {"cwd": session.cwd}}
