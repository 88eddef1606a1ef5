"""Content-Length framing: the base protocol the Copilot SDKs speak over stdio and TCP.

One message is `Content-Length: N\r\n` (other headers, such as `Content-Type`, are read and
ignored), a blank line, then N bytes of JSON. A stream that breaks this cannot be
resynchronised, so a framing fault ends the connection; a body that is not valid JSON-RPC
does not (the peer answers it with a JSON-RPC error).
"""

from __future__ import annotations

import asyncio

from subsessions.errors import SubsessionError

MAX_BODY = 64 * 1024 * 1024  # one message; a larger one is a broken or hostile peer
READ_AHEAD = 64 * 1024  # what a reader buffers ahead of us (and the longest header line)
MAX_HEADERS = 32


class FramingError(SubsessionError):
    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(f"malformed frame: {problem}")


async def read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """The next message body, or None when the stream ended between messages."""
    length: int | None = None
    headers = 0
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            if not exc.partial and headers == 0:
                return None
            raise FramingError("the stream ended inside a header") from None
        except asyncio.LimitOverrunError:
            raise FramingError("a header line is too long") from None
        if line.strip() == b"":
            if headers == 0:
                continue  # blank lines between messages are harmless
            break
        headers += 1
        if headers > MAX_HEADERS:
            raise FramingError("too many header lines")
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep:
            raise FramingError(f"header line without a colon: {line[:60]!r}")
        if name.strip().lower() == "content-length":
            text = value.strip()
            if not text.isdigit() or len(text) > 12:
                raise FramingError(f"Content-Length is not a number: {text[:20]!r}")
            length = int(text)
    if length is None:
        raise FramingError("no Content-Length header")
    if length > MAX_BODY:
        raise FramingError(f"a body of {length} bytes is larger than {MAX_BODY}")
    try:
        return await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise FramingError("the stream ended inside a body") from None


def frame(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
