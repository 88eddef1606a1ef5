"""The A2A server: the SDK's request handler, task store and Starlette routes over one engine,
served by uvicorn until a signal.

JSON-RPC at `/` (A2A 1.0, and the SDK's 0.3 compatibility on the same URL), the card at
`/.well-known/agent-card.json`. A request body over `MAX_BODY_BYTES` is the SDK's `Payload
too large` error. On SIGTERM or SIGINT every running task ends `canceled` (its callers hear
it on their streams) before the server stops, then the engine closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import (
    BasePushNotificationSender,
    InMemoryPushNotificationConfigStore,
    InMemoryTaskStore,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from a2a.utils.push_url_validator import validate_push_notification_url
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware

from subsessions._util.urls import is_loopback, is_loopback_host
from subsessions.a2a import callers
from subsessions.a2a.card import agent_card
from subsessions.a2a.contexts import Contexts
from subsessions.a2a.executor import OwnedContexts, SessionsExecutor
from subsessions.engine import listen
from subsessions.engine.from_settings import engine_from_settings
from subsessions.settings import Settings

MAX_BODY_BYTES = 1 << 20  # a task's message is text: a megabyte is plenty
# the SDK logs every failed task and dropped stream with a traceback: the caller is told,
# and stderr keeps to our one-line messages
_QUIET = ("a2a", "sse_starlette")


def build_app(contexts: Contexts, url: str, tokens: tuple[str, ...] | None,
              push_http: httpx.AsyncClient, *, loopback: bool) -> tuple[Starlette, Any]:
    """The Starlette app and its request handler (closed by the caller)."""

    async def push_allowed(target: str) -> bool:  # a loopback server's own host may listen
        return (loopback and is_loopback(target)) or await validate_push_notification_url(
            target)

    card = agent_card(url, contexts.engine.profiles, auth=tokens is not None)
    pushes = InMemoryPushNotificationConfigStore()
    handler = DefaultRequestHandler(
        agent_executor=SessionsExecutor(contexts), task_store=InMemoryTaskStore(),
        agent_card=card, push_config_store=pushes,
        push_sender=BasePushNotificationSender(push_http, pushes,
                                               push_url_validator=push_allowed),
        request_context_builder=OwnedContexts(contexts), push_url_validator=push_allowed)
    routes = [*create_agent_card_routes(card),
              *create_jsonrpc_routes(handler, "/", enable_v0_3_compat=True)]
    public = frozenset({AGENT_CARD_WELL_KNOWN_PATH})
    app = Starlette(routes=routes, middleware=[
        Middleware(AuthenticationMiddleware, backend=callers.backend(tokens, public),
                   on_error=callers.unauthorized),
        Middleware(_BodyLimit, limit=MAX_BODY_BYTES)])
    return app, handler


class _BodyLimit:
    """A body over `limit` fails while the SDK reads it (HTTP 413 raised inside its read),
    so the caller gets the SDK's JSON-RPC error, not a bare 413 page."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", ())).get(b"content-length", b"0")
        refused = declared.isdigit() and int(declared) > self.limit  # before reading it
        seen = 0

        async def limited() -> Any:
            nonlocal seen
            if refused:
                raise HTTPException(413)
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise HTTPException(413)
            return message

        await self.app(scope, limited, send)


async def serve(home: Path, settings: Settings, host: str, port: int,
                tokens: tuple[str, ...] | None, *, keep_open: int = 64) -> int:
    """Serve until a signal; the exit code (128 + the signal's number)."""
    for name in _QUIET:
        logging.getLogger(name).setLevel(logging.ERROR)
    sock = listen.bind(host, port)
    url = f"http://{listen.shown_host(host)}:{sock.getsockname()[1]}/"
    try:
        async with (engine_from_settings(home, settings) as engine,
                    httpx.AsyncClient(timeout=10.0) as push_http):
            contexts = Contexts(engine, settings, keep_open=keep_open)
            app, handler = build_app(contexts, url, tokens, push_http,
                                     loopback=is_loopback_host(host))
            server = _Server(uvicorn.Config(app, log_level="warning", lifespan="off"),
                             contexts)
            print(f"subsessions a2a: serving A2A at {url} (agent card: "
                  f"{url.rstrip('/')}{AGENT_CARD_WELL_KNOWN_PATH})", file=sys.stderr,
                  flush=True)
            try:
                await server.serve(sockets=[sock])
            finally:
                await contexts.cancel_all()
                await handler.aclose()
                await contexts.close()
    finally:
        sock.close()
    return 128 + (server.signalled or signal.SIGTERM)


class _Server(uvicorn.Server):
    """uvicorn, whose signals first end every task `canceled` (callers hear it), then stop
    it; uvicorn's own capture would re-raise the signal before the engine is closed."""

    def __init__(self, config: uvicorn.Config, contexts: Contexts) -> None:
        super().__init__(config)
        self.contexts = contexts
        self.signalled: int | None = None
        self._stopping: asyncio.Task[None] | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        loop = asyncio.get_running_loop()

        def stop(signum: int) -> None:
            self.signalled = self.signalled or signum
            if self._stopping is None:
                self._stopping = loop.create_task(self._stop(), name="subsessions-a2a-stop")
            elif signum == signal.SIGINT:
                self.force_exit = True

        with _handlers(loop, stop):
            yield

    async def _stop(self) -> None:
        try:
            await self.contexts.cancel_all()
        finally:
            self.should_exit = True


@contextlib.contextmanager
def _handlers(loop: asyncio.AbstractEventLoop,
              stop: Callable[[int], None]) -> Iterator[None]:
    added = []
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        try:
            loop.add_signal_handler(signum, stop, signum)
            added.append(signum)
        except (NotImplementedError, RuntimeError):  # not the main thread
            pass
    try:
        yield
    finally:
        for signum in added:
            loop.remove_signal_handler(signum)
