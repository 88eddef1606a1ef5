"""A profile with `a2a_url` is a child that is a remote A2A agent (DESIGN 3.15), judged
against an agent built on `a2a-sdk`'s own server on loopback, in this process: its answer,
its rollout, a follow-up in the agent's context, `input-required`, a cancel that reaches the
agent, a token, a dead URL and a bad card; and the profile keys' strict checks."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from a2a_support import TIMEOUT, Model, a2a_server
from fake_openai import FakeOpenAI, fake_openai
from openai_support import run

import subsessions
from subsessions import ChildFailed, Engine, ScriptedModel, SessionConfig
from subsessions.engine.from_settings import engine_from_settings
from subsessions.models.a2a_remote import RemoteAgents
from subsessions.profiles import parse_profile
from subsessions.rollouts import find_rollout, read_rollout
from subsessions.settings import load_settings, with_overrides

__all__ = ["fake_openai"]
uvicorn = pytest.importorskip("uvicorn", reason="pip install 'subsessions[a2a]'")
from a2a.helpers.proto_helpers import (  # noqa: E402
    new_task_from_user_message,
    new_text_message,
    new_text_part,
)
from a2a.server.agent_execution import AgentExecutor, RequestContext  # noqa: E402
from a2a.server.events import EventQueue  # noqa: E402
from a2a.server.request_handlers import DefaultRequestHandler  # noqa: E402
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes  # noqa: E402
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater  # noqa: E402
from a2a.types import (  # noqa: E402
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Role,
)
from starlette.applications import Starlette  # noqa: E402
from starlette.responses import JSONResponse, PlainTextResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402


class Remote(AgentExecutor):
    """The remote agent: echoes, asks, fails or hangs by the text it is sent."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []  # (text, contextId)
        self.hanging = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        self.seen.append((text, context.context_id or ""))
        if text == "direct":  # a reply with no task at all
            await event_queue.enqueue_event(new_text_message(
                "a direct reply", context_id=context.context_id, role=Role.ROLE_AGENT))
            return
        updater = TaskUpdater(event_queue, context.task_id or "", context.context_id or "")
        if context.current_task is None and context.message is not None:
            await event_queue.enqueue_event(new_task_from_user_message(context.message))
        await updater.start_work()
        if text == "need input":
            await updater.requires_input(updater.new_agent_message([new_text_part(
                "which file?")]))
            return
        if text == "fail":
            await updater.failed(updater.new_agent_message([new_text_part("disk on fire")]))
            return
        if text == "hang":
            self.hanging.set()
            await asyncio.Event().wait()
        await updater.add_artifact([new_text_part(f"remote says: {text} "
                                                  f"(#{len(self.seen)})")])
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        self.cancelled.set()
        await TaskUpdater(event_queue, context.task_id or "", context.context_id or "").cancel()


class _Bearer:
    def __init__(self, app: Any, token: str) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers", ()))
        if scope["type"] == "http" and headers.get(b"authorization") != (
                f"Bearer {self.token}".encode()):
            await PlainTextResponse("no", status_code=401)(scope, receive, send)
            return
        await self.app(scope, receive, send)


@asynccontextmanager
async def serving(build: Callable[[str], Any]) -> AsyncIterator[str]:
    """The app `build(url)` makes, on uvicorn at 127.0.0.1:<free port> in this loop; its
    base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    app = build(url)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    server.capture_signals = _no_signals  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield url
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, TIMEOUT)
        sock.close()
        await _stop_sse_watcher()


async def _stop_sse_watcher() -> None:
    """sse-starlette (the SDK's SSE) starts one shutdown watcher per event loop, which
    outlives every server by design (it polls for a process-wide exit): this loop is the
    test's, so it is ended here."""
    watchers = [t for t in asyncio.all_tasks()
                if getattr(t.get_coro(), "__name__", "") == "_shutdown_watcher"]
    for watcher in watchers:
        watcher.cancel()
    if watchers:
        await asyncio.wait(watchers)


class _NoSignals:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _no_signals() -> _NoSignals:
    return _NoSignals()


@asynccontextmanager
async def remote_agent(executor: Remote, *, streaming: bool = True,
                       token: str | None = None) -> AsyncIterator[str]:
    """An agent on `a2a-sdk`'s server (its handler, task store and routes)."""
    handlers: list[DefaultRequestHandler] = []

    def build(url: str) -> Any:
        card = AgentCard(
            name="remote", description="a remote agent", version="1",
            supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC",
                                                 protocol_version="1.0")],
            capabilities=AgentCapabilities(streaming=streaming),
            default_input_modes=["text/plain"], default_output_modes=["text/plain"],
            skills=[AgentSkill(id="echo", name="echo", description="echoes", tags=["echo"])])
        handler = DefaultRequestHandler(agent_executor=executor,
                                        task_store=InMemoryTaskStore(), agent_card=card)
        handlers.append(handler)
        app: Any = Starlette(routes=[*create_agent_card_routes(card),
                                     *create_jsonrpc_routes(handler, "/")])
        return app if token is None else _Bearer(app, token)

    try:
        async with serving(build) as url:
            yield url
    finally:
        for handler in handlers:
            await handler.aclose()


def write_profile(home: Path, url: str, token_env: str | None = None) -> None:
    folder = home / "profiles"
    folder.mkdir(parents=True, exist_ok=True)
    extra = f'a2a_token_env = "{token_env}"\n' if token_env else ""
    (folder / "remote.toml").write_text(
        f'name = "remote"\ndescription = "a remote agent"\na2a_url = "{url}"\n{extra}')


def records(home: Path, session_id: str) -> list[dict[str, Any]]:
    return read_rollout(find_rollout(home, session_id)).records


@asynccontextmanager
async def engine(home: Path) -> AsyncIterator[Engine]:
    """A Python host's engine: its own client wrapped so `a2a:` models reach the agents."""
    client = RemoteAgents(ScriptedModel(["unused"]))
    try:
        async with Engine(home, model_client=client) as eng:
            yield eng
    finally:
        await client.aclose()


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "send"])
async def test_a_remote_agent_answers_as_a_child_and_its_rollout_has_the_exchange(
    home: Path, streaming: bool
) -> None:
    remote = Remote()
    async with remote_agent(remote, streaming=streaming) as url:
        write_profile(home, url)
        async with engine(home) as eng:
            parent = await eng.create_session(SessionConfig())
            child = await parent.subsessions.spawn_child("remote", "hello remote")
            answer = await parent.subsessions.wait_child(child, timeout=TIMEOUT)
            assert answer == "remote says: hello remote (#1)"
            assert await parent.subsessions.send_message(child, "and again") == "started"
            again = await parent.subsessions.wait_child(child, timeout=TIMEOUT)
            assert again == "remote says: and again (#2)"
    (_, first_context), (_, second_context) = remote.seen
    assert first_context and second_context == first_context  # the follow-up, in context
    meta = read_rollout(find_rollout(home, child)).meta
    assert meta["source"]["subagent"]["thread_spawn"]["agent_role"] == "remote"
    said = [(r["payload"]["type"], r["payload"]["message"]) for r in records(home, child)
            if r["type"] == "event_msg" and r["payload"]["type"] in ("user_message",
                                                                    "agent_message")]
    assert said == [("user_message", "hello remote"),
                    ("agent_message", "remote says: hello remote (#1)"),
                    ("user_message", "and again"),
                    ("agent_message", "remote says: and again (#2)")]


async def test_input_required_or_a_failure_fails_the_child_with_the_agents_words(
    home: Path
) -> None:
    remote = Remote()
    async with remote_agent(remote) as url:
        write_profile(home, url)
        async with engine(home) as eng:
            parent = await eng.create_session(SessionConfig())
            asks = await parent.subsessions.spawn_child("remote", "need input")
            fails = await parent.subsessions.spawn_child("remote", "fail")
            with pytest.raises(ChildFailed) as asked:
                await parent.subsessions.wait_child(asks, timeout=TIMEOUT)
            assert asked.value.error == "remote agent needs input: which file?"
            with pytest.raises(ChildFailed) as failed:
                await parent.subsessions.wait_child(fails, timeout=TIMEOUT)
            assert failed.value.error.startswith(f"remote agent {url}: task ")
            assert failed.value.error.endswith(" failed: disk on fire")


async def test_a_direct_message_is_the_answer(home: Path) -> None:
    async with remote_agent(Remote()) as url:
        write_profile(home, url)
        async with engine(home) as eng:
            parent = await eng.create_session(SessionConfig())
            child = await parent.subsessions.spawn_child("remote", "direct")
            assert await parent.subsessions.wait_child(child, timeout=TIMEOUT) == (
                "a direct reply")
            listed = [info.listing() for info in parent.subsessions.children()]
    assert [(e["session_id"], e["session_type"], e["status"]) for e in listed] == [
        (child, "remote", "completed")]


async def test_cancelling_the_child_cancels_the_agents_task(home: Path) -> None:
    remote = Remote()
    async with remote_agent(remote) as url:
        write_profile(home, url)
        async with engine(home) as eng:
            parent = await eng.create_session(SessionConfig())
            child = await parent.subsessions.spawn_child("remote", "hang")
            async with asyncio.timeout(TIMEOUT):
                await remote.hanging.wait()
            assert await parent.subsessions.cancel_child(child) is True
            async with asyncio.timeout(TIMEOUT):
                await remote.cancelled.wait()
    last = records(home, child)[-1]["payload"]
    assert last["type"] == "turn_aborted" and last["cancelled_by"] == "parent"


async def test_the_token_and_one_line_failures(home: Path, monkeypatch: pytest.MonkeyPatch
                                               ) -> None:
    async def not_a_card(_request: Any) -> PlainTextResponse:
        return PlainTextResponse("not a card")

    async def empty_card(_request: Any) -> JSONResponse:
        return JSONResponse({"name": 3})

    remote = Remote()
    bad = Starlette(routes=[Route("/.well-known/agent-card.json", not_a_card),
                            Route("/empty/.well-known/agent-card.json", empty_card)])
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{closed.getsockname()[1]}/"
    monkeypatch.setenv("REMOTE_TOKEN", "t0ken")
    async with remote_agent(remote, token="t0ken") as url, serving(lambda _: bad) as bad_url:
        extra = [subsessions.Profile(name="dead", a2a_url=dead),
                 subsessions.Profile(name="garbled", a2a_url=bad_url),
                 subsessions.Profile(name="empty", a2a_url=bad_url + "empty/"),
                 subsessions.Profile(name="tokened", a2a_url=url, a2a_token_env="REMOTE_TOKEN"),
                 subsessions.Profile(name="tokenless", a2a_url=url)]
        async with engine(home) as eng:
            parent = await eng.create_session(SessionConfig(custom_agents=extra))
            errors = {}
            for name in ("dead", "garbled", "empty", "tokenless"):
                child = await parent.subsessions.spawn_child(name, "hello")
                with pytest.raises(ChildFailed) as failed:
                    await parent.subsessions.wait_child(child, timeout=TIMEOUT)
                errors[name] = failed.value.error
            child = await parent.subsessions.spawn_child("tokened", "hello")
            assert (await parent.subsessions.wait_child(child, timeout=TIMEOUT)).startswith(
                "remote says: hello")
    for name, error in errors.items():
        assert error.startswith("remote agent http://127.0.0.1:"), (name, error)
        assert "\n" not in error and len(error) < 500, (name, error)
    assert "no usable agent card" in errors["dead"]
    assert "no usable agent card" in errors["garbled"]


async def test_engines_from_settings_route_a2a_profiles_to_the_agent(home: Path) -> None:
    remote = Remote()
    async with remote_agent(remote) as url:
        write_profile(home, url)
        settings = with_overrides(load_settings(home), base_url="http://127.0.0.1:9/v1",
                                  wire_api="chat", model="m")
        async with engine_from_settings(home, settings) as eng:
            parent = await eng.create_session(SessionConfig())
            child = await parent.subsessions.spawn_child("remote", "via settings")
            answer = await parent.subsessions.wait_child(child, timeout=TIMEOUT)
    assert answer == "remote says: via settings (#1)"


@pytest.mark.parametrize(("text", "said"), [
    ('name = "r"\na2a_url = "ftp://x"\n', "a2a_url must be an http(s) URL"),
    ('name = "r"\na2a_url = 3\n', "a2a_url must be a string"),
    ('name = "r"\na2a_token_env = "T"\n', "a2a_token_env needs a2a_url"),
    ('name = "r"\na2a_url = "http://h/"\na2a_token_env = "1 bad"\n',
     "a2a_token_env must name an environment variable"),
    ('name = "r"\na2a_urls = "http://h/"\n', "unknown key 'a2a_urls'"),
])
def test_the_profile_keys_are_checked_strictly(text: str, said: str) -> None:
    with pytest.raises(subsessions.ProfileError, match=re.escape(said)):
        parse_profile(text, "remote.toml")


async def test_profiles_show_names_the_agent(home: Path, tmp_path: Path) -> None:
    write_profile(home, "http://127.0.0.1:9/agent/", "REMOTE_TOKEN")
    code, out, _ = await run("profiles", "show", "remote", "--home", str(home), cwd=tmp_path)
    assert code == 0
    assert "a2a_url (a remote A2A agent): http://127.0.0.1:9/agent/\n" in out
    assert "a2a_token_env: REMOTE_TOKEN\n" in out


def test_a_remote_profiles_children_run_on_the_agent() -> None:
    profile = parse_profile('name = "r"\na2a_url = "http://h:1/"\na2a_token_env = "T"\n', "f")
    assert profile.remote_model == "a2a:http://h:1/;token_env=T"
    assert subsessions.Profile(name="x").remote_model is None


async def test_a_child_can_be_another_subsessions_a2a(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    """Both directions at once: the agent is `subsessions a2a` in another process."""
    fake_openai.script = Model()
    async with a2a_server(tmp_path / "remote-home", fake_openai, tmp_path) as served:
        write_profile(home, served.url)
        async with engine(home) as eng:
            parent = await eng.create_session(SessionConfig())
            child = await parent.subsessions.spawn_child("remote", "hello")
            assert await parent.subsessions.wait_child(child, timeout=TIMEOUT) == (
                "hello: answered (1 user messages seen)")
            assert await parent.subsessions.send_message(child, "again") == "started"
            assert await parent.subsessions.wait_child(child, timeout=TIMEOUT) == (
                "again: answered (2 user messages seen)")  # the agent's context continues
