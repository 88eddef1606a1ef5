"""A raw control-socket client for the tests: lines in, parsed lines out, bounded waits."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson

from subsessions import Engine
from subsessions.engine.control import paths

BOUND = 10.0  # seconds any one answer may take


class Line:
    """One connection to an engine's control socket."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self._ids = 0

    @classmethod
    async def open(cls, path: Path) -> Line:
        reader, writer = await asyncio.open_unix_connection(sock=paths.connect(path),
                                                            limit=4 * 1024 * 1024)
        return cls(reader, writer)

    @classmethod
    async def of(cls, engine: Engine) -> Line:
        """A connection to the engine's control socket (it must have opened one)."""
        assert engine.control_path is not None, "no session asked for control=True"
        return await cls.open(engine.control_path)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def answer(self) -> dict[str, Any]:
        line = await asyncio.wait_for(self.reader.readline(), BOUND)
        assert line.endswith(b"\n"), line
        found = orjson.loads(line)
        assert isinstance(found, dict) and found["jsonrpc"] == "2.0", found
        return found

    async def call(self, method: str, params: Any = None) -> dict[str, Any]:
        """The whole answer (result or error) to one request."""
        self._ids += 1
        request: dict[str, Any] = {"jsonrpc": "2.0", "id": self._ids, "method": method}
        if params is not None:
            request["params"] = params
        await self.send(orjson.dumps(request) + b"\n")
        found = await self.answer()
        assert found["id"] == self._ids, found
        return found

    async def result(self, method: str, params: Any = None) -> Any:
        found = await self.call(method, params)
        assert "result" in found, found
        return found["result"]

    async def ended(self) -> bool:
        """Whether the engine closed the connection (nothing more comes)."""
        return await asyncio.wait_for(self.reader.read(1), BOUND) == b""

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


def error_code(answer: dict[str, Any]) -> int:
    assert "error" in answer and "result" not in answer, answer
    return int(answer["error"]["code"])
