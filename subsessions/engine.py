"""The Engine owns top-level sessions and every task they start, and shuts it all down."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Coroutine, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from attrs import evolve

from subsessions.config import SessionConfig, filter_tools
from subsessions.dispatch import Dispatcher
from subsessions.errors import (
    ConfigError,
    EngineClosed,
    InvalidArguments,
    SessionBusy,
    UnknownSession,
    UnknownSessionType,
)
from subsessions.models.base import ModelClient
from subsessions.profiles import LoadedProfile, Profile, load_profiles
from subsessions.rollouts.files import secure_home
from subsessions.rollouts.recorder import RolloutRecorder, RolloutWriter
from subsessions.session import Session

T = TypeVar("T")
# The top-level sessions open in any engine of this process, so none is resumed twice.
OPEN_IN_THIS_PROCESS: set[str] = set()
FLUSH_SECONDS = 0.1
HOOK_SECONDS = 5.0  # how long close waits for the hosts' on_session_end hooks
DRAIN_SECONDS = 10.0  # how long close waits for tasks before cancelling what is left


def default_home() -> Path:
    configured = os.environ.get("SUBSESSIONS_HOME")
    return Path(configured) if configured else Path.home() / ".subsessions"


class Engine:
    """Use as `async with Engine(...) as engine:`; leaving it aborts every descendant.

    Every task the engine starts (top-level tasks and all children) is kept here
    and drained on close, so nothing outlives the engine.
    """

    def __init__(
        self,
        home: Path | str | None = None,
        *,
        model_client: ModelClient,
        model: str = "scripted",
        model_provider: str | None = None,
        profiles: Mapping[str, LoadedProfile] | None = None,
        project_dir: Path | str | None = None,
        mcp_servers: Mapping[str, Any] | None = None,
        mcp_source: str = "config.toml",
    ) -> None:
        self.home = Path(home) if home is not None else default_home()
        if "\0" in str(self.home):
            raise InvalidArguments("Engine", "home must be a path without NUL characters")
        secure_home(self.home)  # refuses, in one line, a home another user could write
        self.model_client = model_client
        self.model = model
        self.model_provider = model_provider or str(
            getattr(model_client, "provider", type(model_client).__name__)
        )
        self.cwd = os.getcwd()
        self.profiles: Mapping[str, LoadedProfile] = (
            profiles if profiles is not None else load_profiles(self.home, project_dir or self.cwd)
        )
        self.writer = RolloutWriter()
        # Recorders with lines not yet handed to the writer; flushed every FLUSH_SECONDS, so
        # a running session's transcript trails it by at most that (`rollouts tail`).
        self.unwritten: set[RolloutRecorder] = set()
        self._flusher: asyncio.Task[None] | None = None
        self.dispatcher = Dispatcher()
        self._sessions: dict[str, Session] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._top_tasks: dict[asyncio.Task[Any], str] = {}  # send_and_wait tasks, by session
        self._mcp_sources: list[Any] = []  # McpServers, started lazily, stopped at close
        if mcp_servers:
            self._mcp_sources.append(_mcp_servers(mcp_servers, mcp_source))
        self._mcp_engine_sources = tuple(self._mcp_sources)
        self._mcp_by_tables: dict[int, tuple[Mapping[str, Any], Any]] = {}
        self._closed = False
        self._closing: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (
            f"<Engine {state} home={str(self.home)!r} sessions={len(self._sessions)} "
            f"tasks={len(self._tasks)}>"
        )

    async def __aenter__(self) -> Engine:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def check_open(self) -> None:
        if self._closed:
            raise EngineClosed()

    async def create_session(
        self,
        config: SessionConfig | None = None,
        *,
        source: str = "exec",
        profile: str | Profile | None = None,
    ) -> Session:
        """A new top-level session, registered with the engine.

        With `profile`, the session runs that profile top-level: its instructions, and
        its persona and memory too (which a child of that profile never sees).
        """
        self.check_open()
        self._start_flusher()
        config = config or SessionConfig()
        mcp_tools, mcp_errors = await self._mcp_tools(config)
        if mcp_tools:
            config = evolve(config, tools=(*config.tools, *mcp_tools))
        chosen = self._top_level_profile(profile, config) if profile is not None else None
        if chosen is not None:
            parts = (config.instructions, chosen.developer_instructions, chosen.persona,
                     chosen.memory)
            config = evolve(
                config,
                instructions="\n\n".join(p for p in parts if p),
                model=config.model or (None if chosen.model == "inherit" else chosen.model),
                tools=filter_tools(config.tools, chosen.tools),
                max_turns=chosen.max_turns,
            )
        self.check_open()  # closing may have started while the MCP servers started
        # No rollout yet: it starts with the first task or child, so a session that never
        # does anything (an MCP connection that only looked) leaves no empty file behind.
        session = Session(self, config, source=source, profile=chosen)
        for name, problem in mcp_errors.items():
            session.note(f"MCP server {name} is unavailable: {problem}")
        self._sessions[session.session_id] = session
        OPEN_IN_THIS_PROCESS.add(session.session_id)
        self.dispatcher.register(session)
        await self.dispatcher.invoke_hook(session, "on_session_start", {"source": source})
        return session

    async def resume_session(
        self, id_or_path: str | os.PathLike[str], config: SessionConfig | None = None
    ) -> Session:
        """Continue a session from its rollout, appending to the same file.

        `config` supplies what a rollout cannot hold (tools, handlers, limits).
        """
        from subsessions.resume import reopen

        self.check_open()
        return await reopen(self, id_or_path, fork=False, config=config)

    async def fork_session(
        self, id_or_path: str | os.PathLike[str], config: SessionConfig | None = None
    ) -> Session:
        """A new session (new file, `forked_from_id`) that starts from another's history."""
        from subsessions.resume import reopen

        self.check_open()
        return await reopen(self, id_or_path, fork=True, config=config)

    def adopt(self, session: Session) -> None:
        """Register a session built from disk (resume, fork) as top-level."""
        if session.session_id in self._sessions:
            raise SessionBusy(session.session_id, "is already open in this engine")
        self._start_flusher()
        self._sessions[session.session_id] = session
        OPEN_IN_THIS_PROCESS.add(session.session_id)
        self.dispatcher.register(session)

    async def _mcp_tools(self, config: SessionConfig) -> tuple[tuple[Any, ...], dict[str, str]]:
        """The engine's and the config's MCP servers' tools, starting each source once."""
        sources = list(self._mcp_engine_sources)
        if config.mcp_servers:
            key = id(config.mcp_servers)
            known = self._mcp_by_tables.get(key)
            if known is None or known[0] is not config.mcp_servers:  # once per engine
                own = _mcp_servers(config.mcp_servers, "SessionConfig.mcp_servers")
                known = self._mcp_by_tables[key] = (config.mcp_servers, own)
                self._mcp_sources.append(own)
            sources.append(known[1])
        tools: list[Any] = []
        errors: dict[str, str] = {}
        for source in sources:
            tools.extend(await source.tools())
            errors.update(source.errors)
        return tuple(tools), errors

    def _top_level_profile(self, profile: str | Profile, config: SessionConfig) -> Profile:
        if isinstance(profile, Profile):
            return profile
        known = {name: lp.profile for name, lp in self.profiles.items()}
        known.update({p.name: p for p in config.custom_agents})
        if profile not in known:
            raise UnknownSessionType(str(profile), tuple(sorted(known)))
        return known[profile]

    def _start_flusher(self) -> None:
        if self._flusher is None:
            self._flusher = asyncio.get_running_loop().create_task(
                self._flush_periodically(), name="subsessions-rollout-flusher"
            )

    async def _flush_periodically(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            self._flush_unwritten()

    def _flush_unwritten(self) -> None:
        dirty = list(self.unwritten)
        self.unwritten.clear()
        for recorder in dirty:
            recorder.flush()

    def sessions(self) -> list[Session]:
        return list(self._sessions.values())

    def get_session(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    def resolve_session(self, session_id: str) -> tuple[Session, bool]:
        """The registered session answering for `session_id` (a child's: its top-level one)."""
        return self.dispatcher.resolve_session(session_id)

    async def destroy_session(self, session_id: str) -> None:
        """Abort a top-level session's descendants and forget it; its rollouts stay on disk."""
        session = self._sessions.pop(session_id, None)  # a second destroy finds nothing
        if session is None:
            raise UnknownSession(session_id)
        running = [task for task, owner in self._top_tasks.items() if owner == session_id]
        for task in running:
            task.cancel()  # its children are aborted by the task itself, first
        if running:
            await asyncio.wait(running)
        await session.subsessions.abort_all_children()
        await self.dispatcher.invoke_hook(session, "on_session_end", {"reason": "destroy"})
        self.dispatcher.unregister(session_id)
        OPEN_IN_THIS_PROCESS.discard(session_id)
        session.events.close()
        await session.recorder.flush_durable()

    async def delete_session(self, session_id: str) -> None:
        """Destroy a top-level session and delete its rollout and its descendants'."""
        session = self._sessions.get(session_id)
        if session is None:
            raise UnknownSession(session_id)
        paths = [s.recorder.path for s in session.subsessions.tree()] + [session.recorder.path]
        await self.destroy_session(session_id)
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)

    # -- task ownership ---------------------------------------------------------------------
    def spawn_task(
        self, coro: Coroutine[Any, Any, T], name: str, *, while_closing: bool = False
    ) -> asyncio.Task[T]:
        """Start a task the engine owns; refused once closing started, except for the
        clean-up work of endings (hooks), which close then drains like every task."""
        if self._closed and not (while_closing and self._closing is not None):
            coro.close()
            raise EngineClosed()
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def run_owned(self, coro: Coroutine[Any, Any, T], session_id: str = "") -> T:
        """Run `coro` in an owned task; cancelling the caller cancels it, and closing the
        engine (or destroying the session) raises `EngineClosed` in the caller."""
        task = self.spawn_task(coro, "subsessions-task")
        self._top_tasks[task] = session_id
        task.add_done_callback(self._forget_top_task)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                task.cancel()
                await asyncio.wait((task,))
                raise
            if self._closed or session_id not in self._sessions:
                raise EngineClosed() from None
            raise

    def _forget_top_task(self, task: asyncio.Task[Any]) -> None:
        self._top_tasks.pop(task, None)

    # -- shutdown ---------------------------------------------------------------------------
    async def close(self) -> None:
        """Abort every descendant, drain every task, write every rollout; idempotent.

        The shutdown runs in a task of its own: a caller cancelled half-way (Ctrl-C) does
        not leave it half done, and every later `close()` waits for the same one.
        """
        self._closed = True
        if self._closing is None:
            self._closing = asyncio.get_running_loop().create_task(
                self._shut_down(), name="subsessions-close"
            )
        if asyncio.current_task() in self._tasks:
            return  # called from inside the engine: the shutdown will cancel the caller
        await asyncio.shield(self._closing)

    async def _shut_down(self) -> None:
        sessions = list(self._sessions.values())
        for task in list(self._top_tasks):
            task.cancel()  # a top-level task aborts its own children first
        await asyncio.gather(
            *(s.subsessions.abort_all_children() for s in sessions), return_exceptions=True
        )
        await self._end_hooks(sessions)
        await self._drain_tasks()
        try:
            if self._flusher is not None:
                self._flusher.cancel()
                await asyncio.wait((self._flusher,))
            self._flush_unwritten()
            flushed = [s.recorder.flush_durable() for s in sessions]
            if flushed:
                await asyncio.wait(flushed)
            for future in flushed:
                future.exception()  # retrieved: a failed last write must not warn at exit
            for source in self._mcp_sources:
                await source.aclose()
        finally:
            await self.writer.aclose()
            for session in sessions:
                session.events.close()
                OPEN_IN_THIS_PROCESS.discard(session.session_id)
            self._sessions.clear()
            self.dispatcher.clear()

    async def _end_hooks(self, sessions: list[Session]) -> None:
        """Top-level `on_session_end` hooks, after the cancelling, never for long."""
        loop = asyncio.get_running_loop()
        hooks = [
            loop.create_task(self.dispatcher.invoke_hook(s, "on_session_end", {"reason": "close"}))
            for s in sessions if s.config.hooks is not None
        ]
        if hooks:
            _, late = await asyncio.wait(hooks, timeout=HOOK_SECONDS)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late)

    async def _drain_tasks(self) -> None:
        """Wait for every owned task; what has not ended after a grace period is cancelled."""
        grace = True
        while self._tasks:
            _, pending = await asyncio.wait(
                list(self._tasks), timeout=DRAIN_SECONDS if grace else None
            )
            if pending and grace:
                for task in pending:
                    task.cancel()
                grace = False


def _mcp_servers(tables: Mapping[str, Any], source: str) -> Any:
    """An `McpServers` for the tables; the MCP SDK is an optional extra."""
    try:
        from subsessions.mcp.client import McpServers
    except ImportError:
        raise ConfigError(source, "mcp_servers", "needs the MCP SDK: pip install "
                          "'subsessions[mcp]'") from None
    return McpServers(tables, source=source)
