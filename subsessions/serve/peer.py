"""A JSON-RPC 2.0 peer over one framed stream: requests both ways, notifications, errors.

Requests from the host run concurrently, each in a task the peer owns (a `sendAndWait`
may wait minutes while the host answers tool calls on the same stream). Writes happen in
call order, so a notification sent before a response reaches the host first; while the
host leaves them unread, the peer reads nothing more from it. A body that
is not JSON-RPC gets a JSON-RPC error and the peer goes on; a framing fault ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from attrs import define, field

from subsessions.engine.control.rpc import (  # the one JSON-RPC error type and its codes
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    RpcError,
)
from subsessions.errors import SubsessionError
from subsessions.serve.framing import frame, read_frame

log = logging.getLogger("subsessions.serve")
__all__ = ["INTERNAL_ERROR", "INVALID_PARAMS", "INVALID_REQUEST", "METHOD_NOT_FOUND",
           "PARSE_ERROR", "Peer", "PeerClosed", "RpcError"]

Handler = Callable[[dict[str, Any]], Awaitable[Any]]


class PeerClosed(SubsessionError):
    def __init__(self) -> None:
        super().__init__("the host closed the connection")


@define(eq=False)
class Peer:
    _reader: asyncio.StreamReader
    _writer: asyncio.StreamWriter
    methods: dict[str, Handler] = field(factory=dict)
    _pending: dict[int, asyncio.Future[Any]] = field(factory=dict, init=False)
    _tasks: set[asyncio.Task[None]] = field(factory=set, init=False)
    _ids: itertools.count[int] = field(factory=lambda: itertools.count(1), init=False)
    _closed: bool = field(default=False, init=False)

    @property
    def closed(self) -> bool:
        return self._closed

    async def serve(self) -> None:
        """Read and answer until the host closes the stream (or breaks its framing)."""
        try:
            while True:
                await self._room()
                if (body := await read_frame(self._reader)) is None:
                    break
                self._receive(body)
        finally:
            await self.close()

    async def _room(self) -> None:
        """Backpressure: while the host leaves what we wrote unread past the transport's
        high-water mark, we read nothing more from it (so it cannot make us hold its
        answers without bound); reading resumes once the transport has drained."""
        transport = self._writer.transport
        backlog = transport.get_write_buffer_size()
        if backlog <= transport.get_write_buffer_limits()[1]:
            return
        log.debug("reading paused: the host has not read %d bytes", backlog)
        with contextlib.suppress(ConnectionError):  # gone: the next read ends the loop
            await self._writer.drain()

    async def close(self) -> None:
        """Stop: pending outgoing requests fail, handlers still running are cancelled."""
        if not self._closed:
            self._closed = True
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(PeerClosed())
            self._pending.clear()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        if not self._writer.is_closing():
            self._writer.close()

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self._write({"jsonrpc": "2.0", "method": method, "params": params})

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        """Ask the host; its error answer raises `RpcError`, a closed stream `PeerClosed`."""
        if self._closed:
            raise PeerClosed()
        request_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            self._write({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
            return await future
        finally:
            self._pending.pop(request_id, None)

    # -- incoming ---------------------------------------------------------------------------
    def _receive(self, body: bytes) -> None:
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            self._answer(None, error=RpcError(PARSE_ERROR, f"parse error: {exc}"))
            return
        if not isinstance(message, dict):
            self._answer(None, error=RpcError(INVALID_REQUEST, "a message must be an object"))
            return
        method = message.get("method")
        if method is None and "id" in message:
            self._response(message)
            return
        request_id = message.get("id")
        if not isinstance(method, str) or not isinstance(request_id, str | int | None):
            self._answer(request_id if isinstance(request_id, str | int) else None,
                         error=RpcError(INVALID_REQUEST, "invalid request"))
            return
        if "id" not in message:
            return  # a notification ($/cancelRequest, ...): none needs an answer here
        task = asyncio.get_running_loop().create_task(
            self._handle(request_id, method, message.get("params")), name=f"serve-{method}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _response(self, message: dict[str, Any]) -> None:
        future = self._pending.get(message["id"]) if isinstance(message["id"], int) else None
        if future is None or future.done():
            return  # an answer to nothing we asked (or asked and gave up on)
        if "error" in message:
            future.set_exception(_host_error(message["error"]))
        else:
            future.set_result(message.get("result"))

    async def _handle(self, request_id: str | int | None, method: str, params: Any) -> None:
        handler = self.methods.get(method)
        if handler is None:
            self._answer(request_id, error=RpcError(METHOD_NOT_FOUND,
                                                    f"Unhandled method {method}"))
            return
        if params is None:
            params = {}
        if not isinstance(params, dict):
            self._answer(request_id, error=RpcError(INVALID_PARAMS, "params must be an object"))
            return
        try:
            result = await handler(params)
        except RpcError as exc:
            self._answer(request_id, error=exc)
        except (SubsessionError, ValueError, TypeError) as exc:
            self._answer(request_id, error=RpcError(INVALID_PARAMS, str(exc)))
        except Exception as exc:
            log.exception("%s failed", method)
            self._answer(request_id, error=RpcError(INTERNAL_ERROR, f"{method} failed: {exc}"))
        else:
            self._answer(request_id, result=result)

    def _answer(
        self, request_id: str | int | None, *, result: Any = None, error: RpcError | None = None
    ) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        if error is not None:
            message["error"] = error.as_dict()
        else:
            message["result"] = result
        self._write(message)

    def _write(self, message: dict[str, Any]) -> None:
        if self._closed or self._writer.is_closing():
            return  # the host is gone: nobody can read it
        self._writer.write(frame(orjson.dumps(message)))


def _host_error(error: Any) -> RpcError:
    """The host's error answer as an `RpcError`, however it is shaped (a host's malformed
    answer fails that one request, never the runtime)."""
    if not isinstance(error, dict):
        return RpcError(INTERNAL_ERROR, f"the host answered with a malformed error: {error!r:.200}")
    code, text = error.get("code"), str(error.get("message", ""))
    if not isinstance(code, int) or isinstance(code, bool):
        return RpcError(INTERNAL_ERROR, f"{text:.500} (the host's error code {code!r:.40} is "
                        "not an integer)", error.get("data"))
    return RpcError(code, text, error.get("data"))
