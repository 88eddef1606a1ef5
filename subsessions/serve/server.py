"""`subsessions serve`: the runtime process a Copilot SDK host launches.

    subsessions serve [--home DIR] [model options] --stdio   # what the SDKs' for_stdio runs
    subsessions serve [...] --port N                         # 127.0.0.1:N (0: any free port)

The SDKs append `--headless --no-auto-update [--log-level L] [--auth-token-env NAME]
[--no-auto-login] [--session-idle-timeout S] [--remote]`; all are accepted. Without
`--stdio` the runtime listens on loopback and prints `listening on port N` (the line the
SDKs wait for); `$COPILOT_CONNECTION_TOKEN`, when set, must be presented by `connect`.

Exit: stdin closing (stdio), `runtime.shutdown`, SIGTERM, SIGHUP or Ctrl-C close the engine
(every running tree is cancelled and its rollouts end with `turn_aborted`) and the model
client. Exit code 0, or 128 + the signal's number after a signal.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from subsessions.engine.facade import Engine
from subsessions.engine.from_settings import engine_from_settings
from subsessions.errors import ConfigError
from subsessions.serve import LOG_LEVELS
from subsessions.serve.connection import Connection
from subsessions.serve.framing import READ_AHEAD, FramingError
from subsessions.serve.peer import Peer
from subsessions.serve.stdio import stdio_streams
from subsessions.settings import Settings

TOKEN_ENV = "COPILOT_CONNECTION_TOKEN"
_STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
Finish = Callable[[int], None]
log = logging.getLogger("subsessions.serve")


def run_serve_command(args: argparse.Namespace, home: Path, settings: Settings) -> int:
    if args.port is not None and not 0 <= args.port <= 65535:
        raise ConfigError("command line", "--port", f"must be 0..65535, not {args.port}")
    logging.basicConfig(stream=sys.stderr, format="subsessions serve: %(message)s")
    logging.getLogger("subsessions").setLevel(LOG_LEVELS[args.log_level])
    out = _protect_stdout()
    try:
        return asyncio.run(_main(home, settings, out, None if args.stdio else args.port or 0))
    except KeyboardInterrupt:
        return 130


def _protect_stdout() -> int:
    """Our own descriptor for stdout; fd 1 becomes stderr, so a stray print (ours or a
    library's) can never corrupt the framed stream."""
    out = os.dup(sys.stdout.fileno())
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    return out


async def _main(home: Path, settings: Settings, out: int, port: int | None) -> int:
    loop = asyncio.get_running_loop()
    stop: asyncio.Future[int] = loop.create_future()

    def finish(code: int) -> None:
        if not stop.done():
            stop.set_result(code)

    for signum in _STOPS:
        loop.add_signal_handler(signum, finish, 128 + signum)
    try:
        async with engine_from_settings(home, settings) as engine:
            serve = (_serve_stdio(engine, settings, out, finish) if port is None
                     else _serve_tcp(engine, settings, port, out, finish))
            serving = loop.create_task(serve, name="subsessions-serve")
            try:
                await asyncio.wait((serving, stop), return_when=asyncio.FIRST_COMPLETED)
            finally:
                serving.cancel()
                await asyncio.wait((serving,))
            if not serving.cancelled() and serving.exception() is not None:
                raise serving.exception()  # type: ignore[misc]
            return stop.result() if stop.done() else 0
    finally:
        for signum in _STOPS:
            loop.remove_signal_handler(signum)


async def _serve_stdio(engine: Engine, settings: Settings, out: int, finish: Finish) -> None:
    async with stdio_streams(sys.stdin.fileno(), out) as (reader, writer):
        await _serve_one(Peer(reader, writer), engine, settings, None, finish)
    finish(0)  # the host closed stdin


async def _serve_tcp(
    engine: Engine, settings: Settings, port: int, out: int, finish: Finish
) -> None:
    token = os.environ.get(TOKEN_ENV) or None
    connections: set[asyncio.Task[None]] = set()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # The connection runs in a task of ours, cancelled at shutdown; the handler's own
        # task is never cancelled by us (asyncio 3.11 prints a traceback for one that is).
        served = asyncio.get_running_loop().create_task(
            _serve_one(Peer(reader, writer), engine, settings, token, finish),
            name="subsessions-serve-connection")
        connections.add(served)
        served.add_done_callback(connections.discard)
        await asyncio.wait((served,))
        if not served.cancelled():
            served.result()  # a failure is the handler's: asyncio logs it

    try:
        server = await asyncio.start_server(accept, "127.0.0.1", port, limit=READ_AHEAD)
    except OSError as exc:
        os.close(out)
        raise ConfigError("command line", "--port",
                          f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}") from None
    bound = server.sockets[0].getsockname()[1]
    with os.fdopen(out, "wb", buffering=0) as stdout:  # the line the SDKs wait for
        stdout.write(f"listening on port {bound}\n".encode())
    try:
        async with server:
            await asyncio.Future()  # until cancelled: a signal or runtime.shutdown
    finally:
        for task in list(connections):
            task.cancel()
        if connections:
            await asyncio.wait(list(connections))


async def _serve_one(peer: Peer, engine: Engine, settings: Settings, token: str | None,
                     finish: Finish) -> None:
    """Serve one host until it goes away (its sessions are closed) or asks to shut down."""
    connection = Connection(engine, settings, peer, token, on_shutdown=lambda: finish(0))
    try:
        await peer.serve()
    except FramingError as exc:  # the stream cannot be trusted any more
        log.warning("connection ended: %s", exc)
    finally:
        await connection.close()
        await peer.close()
