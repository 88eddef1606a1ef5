"""`subsessions mcp`: the sub-session tools served to an MCP host, over stdio or HTTP.

    subsessions mcp [--home DIR] [model options]            # stdio (what hosts launch)
    subsessions mcp --http 127.0.0.1:8765 [...]             # streamable HTTP at /mcp
        [--session-idle-timeout SECONDS]                    # default 120

One `Engine` serves every connection; each connection is one top-level session
(see `subsessions.mcp.app`). Over stdio the host's `initialize` is answered before the engine
is built (`subsessions.mcp.front` says why): this module imports neither at its top.
HTTP listens on loopback only unless the operator opts in (`SUBSESSIONS_MCP_ALLOW_REMOTE=1`,
or `args.allow_remote`): the server has no
authentication, and whoever reaches it spends the configured model account and reads
every rollout in the home.

An HTTP client that goes away without ending its MCP session (a crash, a dropped
network) leaves no request in flight and no open stream: after `--session-idle-timeout`
seconds of that, its session is closed and its running children are aborted. (A
connected client of the official SDKs keeps a GET stream open, so it is never idle.)

Exit: stdin closing (stdio), SIGTERM or Ctrl-C close the engine (every child is
aborted, its rollout ends with `turn_aborted`) and the model client. Exit code 0 when
the client closed stdin, 128 + the signal's number after a signal (130, 143).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import importlib
import math
import os
import signal
import sys
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from subsessions._util.urls import is_loopback_host
from subsessions.engine import listen
from subsessions.engine.listen import parse_http_address
from subsessions.errors import ConfigError, SubsessionError, error_text
from subsessions.settings import Settings, api_key

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server

    from subsessions.mcp.app import SubsessionsMcp
    from subsessions.mcp.catalog import Catalog
    from subsessions.mcp.front import Deferred

ALLOW_REMOTE_ENV = "SUBSESSIONS_MCP_ALLOW_REMOTE"
DEFAULT_SESSION_IDLE_TIMEOUT = 120.0  # seconds; the SDK's own default is 30 minutes
# 30 days: past any sensible idle time, and far inside what every clock and timer it feeds
# can hold (a task's `ttlMs` is an integer on the wire; `inf` or 1e306 seconds is not).
MAX_SESSION_IDLE_TIMEOUT = 30 * 24 * 3600.0
# What building the app imports (the openai SDK among them), imported off the event loop.
_APP_MODULES = ("subsessions.mcp.app", "subsessions.engine.from_settings",
                "subsessions.models.openai_chat", "subsessions.models.openai_responses",
                "subsessions.ray.backend")
_SDK_MODULES = {"mcp", "mcp_types", "uvicorn", "starlette", "anyio", "httpx2", "sse_starlette"}


def check_http_host(host: str, allow_remote: bool) -> None:
    """The loopback rule (`subsessions.engine.listen`), as `subsessions mcp` words it."""
    listen.check_http_host(host, allow_remote, server="the MCP server",
                           allow_env=ALLOW_REMOTE_ENV)


def check_idle_timeout(seconds: float | None) -> float:
    """`--session-idle-timeout`: seconds, more than 0 and at most 30 days (default 120)."""
    if seconds is None:
        return DEFAULT_SESSION_IDLE_TIMEOUT
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_SESSION_IDLE_TIMEOUT):
        raise ConfigError("command line", "--session-idle-timeout",
                          f"must be more than 0 and at most {MAX_SESSION_IDLE_TIMEOUT:.0f} "
                          f"seconds (30 days), not {seconds:g}")
    return seconds


def run_mcp_command(args: argparse.Namespace, home: Path, settings: Settings) -> int:
    """Serve until the client (stdio) or a signal ends it; returns the exit code."""
    address = getattr(args, "http", None)
    http: tuple[str, int] | None = None
    idle_timeout = check_idle_timeout(getattr(args, "session_idle_timeout", None))
    if address:
        http = parse_http_address(address)
        check_http_host(http[0], listen.remote_allowed(
            ALLOW_REMOTE_ENV, getattr(args, "allow_remote", False)))
    api_key(settings.provider)  # a missing key is told now, not after the handshake
    try:
        from subsessions.mcp import front as _front  # noqa: F401  (the optional [mcp] extra)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in _SDK_MODULES:
            raise
        raise SubsessionError(
            f"`subsessions mcp` needs the MCP SDK ({exc.name} is missing): "
            "pip install 'subsessions[mcp]'"
        ) from None
    try:
        return asyncio.run(_main(home, settings, http, idle_timeout))
    except KeyboardInterrupt:
        return 130


async def _main(
    home: Path, settings: Settings, http: tuple[str, int] | None, idle_timeout: float
) -> int:
    from subsessions.mcp.front import Deferred, front_server

    catalog = _catalog(home)
    async with contextlib.AsyncExitStack() as stack:
        if http is not None:
            app = await _open_app(settings, catalog, stack, idle_timeout, http=True)
            signalled = await _serve_http(app, *http, idle_timeout)
            return 0 if signalled is None else 128 + signalled
        deferred = Deferred(partial(_open_app, settings, catalog, stack, idle_timeout,
                                    http=False))
        # An engine that cannot be built: one line now; every request is told why (the host
        # shows it), and the process ends with 1 when the host closes stdin.
        deferred.failed.add_done_callback(_tell_failure)
        front = front_server(deferred, lambda: catalog().tools())
        signalled = await _serve_stdio(front, deferred)
        if signalled is None:
            return 1 if deferred.failed.done() else 0
        # The SDK reads stdin in a worker thread that only a line or EOF can end, so
        # after a signal everything that matters is closed here and the process leaves
        # without waiting for the host to close stdin.
        await stack.aclose()
        sys.stderr.flush()
        os._exit(128 + signalled)


def _import(names: tuple[str, ...]) -> None:
    for name in names:
        importlib.import_module(name)


def _catalog(home: Path) -> Callable[[], Catalog]:
    """The home's catalog (the profiles, the tools they make), imported and read when first
    asked for: `initialize` is answered before."""

    @functools.cache
    def catalog() -> Catalog:
        from subsessions.mcp.catalog import Catalog

        return Catalog(home)

    return catalog


def _tell_failure(failed: asyncio.Future[Exception]) -> None:
    if not failed.cancelled():
        print(f"subsessions: {error_text(failed.result())}", file=sys.stderr, flush=True)


async def _open_app(settings: Settings, catalog: Callable[[], Catalog],
                    stack: contextlib.AsyncExitStack, idle_timeout: float, *,
                    http: bool) -> SubsessionsMcp:
    """The model client, the engine (Ray's too, on the profiles `tools/list` named) and the
    app; `stack` closes them in the reverse order. Over stdio this runs after the handshake
    (see `subsessions.mcp.front`); the imports go to a thread, so the loop keeps answering
    meanwhile, once the profiles are read (`tools/list` answers from them: a thread importing
    beside it would hold the GIL while it reads them)."""
    listed = catalog()
    profiles = listed.profiles()
    await asyncio.to_thread(_import, _APP_MODULES)
    from subsessions.engine.from_settings import engine_from_settings
    from subsessions.mcp.app import SubsessionsMcp

    engine = await stack.enter_async_context(engine_from_settings(listed.home, settings, profiles))
    return SubsessionsMcp(engine, settings, http=http, idle_timeout=idle_timeout)


@contextlib.contextmanager
def _signal_handler(
    loop: asyncio.AbstractEventLoop, signum: int, handler: Callable[[], None]
) -> Iterator[None]:
    try:
        loop.add_signal_handler(signum, handler)
    except (NotImplementedError, RuntimeError):  # not on this platform / not the main thread
        yield None
        return
    try:
        yield None
    finally:
        loop.remove_signal_handler(signum)


@contextlib.contextmanager
def _stop_signals(on_signal: Callable[[int], None]) -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP call `on_signal(signum)` instead of killing or interrupting."""
    loop = asyncio.get_running_loop()
    with contextlib.ExitStack() as stack:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            stack.enter_context(_signal_handler(loop, signum, partial(on_signal, signum)))
        yield


async def _serve_stdio(server: Server[Any], deferred: Deferred[SubsessionsMcp]) -> int | None:
    """Serve the one client until it closes stdin (None) or a signal comes (its number)."""
    loop = asyncio.get_running_loop()
    signalled: asyncio.Future[int] = loop.create_future()

    def on_signal(signum: int) -> None:
        if not signalled.done():
            signalled.set_result(signum)

    serving = loop.create_task(_run_stdio(server, deferred), name="subsessions-mcp-stdio")
    try:
        with _stop_signals(on_signal):
            await asyncio.wait((serving, signalled), return_when=asyncio.FIRST_COMPLETED)
        if serving.done():
            serving.result()  # its failure, if it failed
            return None
        await _disconnect(deferred.app)  # the client's children first, as a disconnect would
        return signalled.result()
    finally:
        signalled.cancel()
        await deferred.stop()


async def _run_stdio(server: Server[Any], deferred: Deferred[SubsessionsMcp]) -> None:
    from mcp.server.stdio import stdio_server

    try:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        await deferred.stop()
        await _disconnect(deferred.app)
        if deferred.app is not None:
            await deferred.app.drain()


async def _disconnect(app: SubsessionsMcp | None) -> None:
    if app is not None and app.stdio_client is not None:
        await app.stdio_client.close()


async def _serve_http(
    app: SubsessionsMcp, host: str, port: int, idle_timeout: float
) -> int | None:
    """Serve until SIGINT or SIGTERM; returns the signal that ended it."""
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    class Server(uvicorn.Server):
        signalled: int | None = None

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # uvicorn's own capture re-raises the signal after shutdown, which would kill
            # the process before the engine is closed; ours just asks it to stop.
            def stop(signum: int) -> None:
                self.force_exit = self.should_exit and signum == signal.SIGINT
                self.should_exit = True
                self.signalled = signum

            with _stop_signals(stop):
                yield

    security = None
    if is_loopback_host(host):  # DNS-rebinding protection: only loopback Host/Origin headers
        shown = f"[{host}]" if ":" in host else host
        hosts = {"127.0.0.1", "localhost", "[::1]", shown}
        security = TransportSecuritySettings(
            allowed_hosts=[f"{h}:*" for h in sorted(hosts)],
            allowed_origins=[f"http://{h}:*" for h in sorted(hosts)],
        )
    starlette_app = app.server.streamable_http_app(
        host=host, transport_security=security, session_idle_timeout=idle_timeout)
    sock = listen.bind(host, port)
    bound = sock.getsockname()[1]
    shown = listen.shown_host(host)
    server = Server(uvicorn.Config(starlette_app, log_level="warning", lifespan="on"))
    print(f"subsessions mcp: serving streamable HTTP at http://{shown}:{bound}/mcp",
          file=sys.stderr, flush=True)
    try:
        await server.serve(sockets=[sock])
    finally:
        sock.close()
    return server.signalled
