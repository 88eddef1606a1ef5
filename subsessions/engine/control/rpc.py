"""JSON-RPC 2.0 as newline-delimited lines: one request or answer per line.

A line that is not a request gets the error the specification names for it (parse error,
invalid request) with a null id; a request with an id gets exactly one answer; a
notification (no id) gets none. Nothing here raises on what a peer sends.
"""

from __future__ import annotations

from typing import Any

import orjson
from attrs import frozen

from subsessions.errors import SubsessionError

MAX_LINE = 1024 * 1024  # one request; a longer line is answered with an error and skipped
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
SESSION_ERROR = -32000  # the engine refused (busy, closing, a limit)
UNKNOWN_SESSION = -32001  # not a session of this engine
REFUSED = -32003  # the peer is not this engine's user, or too many connections

RequestId = str | int | None


class RpcError(SubsessionError):
    """A JSON-RPC error answer: raised by a handler to choose its code, and by a client on
    an error answer (the control socket's and `subsessions serve`'s alike)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        self.code = code
        self.message = message
        self.data = data
        super().__init__(f"JSON-RPC error {code}: {message}")

    def as_dict(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


@frozen
class Request:
    method: str
    params: dict[str, Any]
    id: RequestId
    notification: bool  # no id: nobody waits for an answer


def parse(line: bytes) -> Request | tuple[RpcError, RequestId]:
    """The request on a line, or the error to answer it with and the id to answer to."""
    try:
        message = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        return RpcError(PARSE_ERROR, f"parse error: {exc}"), None
    if isinstance(message, list):
        return RpcError(INVALID_REQUEST, "batches are not supported: one request a line"), None
    if not isinstance(message, dict):
        return RpcError(INVALID_REQUEST, "a request must be a JSON object"), None
    request_id = message.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, str | int | None) \
            or (isinstance(request_id, int) and not -2**53 < request_id < 2**53):
        return RpcError(INVALID_REQUEST, "the id must be a string, an integer or null"), None
    if message.get("jsonrpc") != "2.0":
        return RpcError(INVALID_REQUEST, 'a request must have "jsonrpc": "2.0"'), request_id
    method = message.get("method")
    if not isinstance(method, str):
        return RpcError(INVALID_REQUEST, "the method must be a string"), request_id
    params = message.get("params", {})
    if not isinstance(params, dict):
        return RpcError(INVALID_PARAMS, "params must be an object"), request_id
    return Request(method, params, request_id, "id" not in message)


def answer(request_id: RequestId, result: Any) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}) + b"\n"


def failure(error: RpcError, request_id: RequestId = None) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "error": error.as_dict()}) + b"\n"


def request(method: str, params: dict[str, Any], request_id: int) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": method,
                         "params": params}) + b"\n"


def result_of(line: bytes, request_id: int) -> Any:
    """The result an answer line carries; `RpcError` for an error answer or a line that is
    not the answer to `request_id`."""
    try:
        message = orjson.loads(line)
    except orjson.JSONDecodeError:
        raise RpcError(INTERNAL_ERROR, "the engine's answer is not JSON") from None
    if not isinstance(message, dict):
        raise RpcError(INTERNAL_ERROR, "the engine's answer is not an object")
    error = message.get("error")
    if isinstance(error, dict):
        code = error.get("code")
        raise RpcError(code if isinstance(code, int) else INTERNAL_ERROR,
                       str(error.get("message", "")), error.get("data"))
    if message.get("id") != request_id or "result" not in message:
        raise RpcError(INTERNAL_ERROR, "the engine's answer is not the answer asked for")
    return message["result"]
