"""The Engine: the facade. It owns one `Runtime` (what sessions share, and every task they
start), the registry of top-level sessions, and their creation, resumption, forking,
destruction and deletion; and it shuts it all down."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from attrs import evolve

from subsessions._core import resume, turns
from subsessions._core.dispatch import Dispatcher
from subsessions._core.runtime import Backend, Runtime
from subsessions._core.session import Session
from subsessions.config import SessionConfig, derive_config
from subsessions.engine.close import shut_down
from subsessions.engine.control.server import ControlServer
from subsessions.engine.mcp_servers import McpSources
from subsessions.errors import (
    InvalidArguments,
    SessionBusy,
    UnknownSession,
)
from subsessions.ids import is_session_id
from subsessions.models.base import ModelClient
from subsessions.otel import engine_tracer
from subsessions.profiles import (
    LoadedProfile,
    Profile,
    load_profiles,
    profile_namespace,
    resolve_profile,
)
from subsessions.rollouts.files import find_rollout, secure_home
from subsessions.settings import default_home

# The top-level sessions open in any engine of this process, so none is resumed twice.
OPEN_IN_THIS_PROCESS: set[str] = set()


class Engine:
    """Use as `async with Engine(...) as engine:`; leaving it aborts every descendant.

    Every task the engine starts (top-level tasks and all children) is kept here
    and drained on close, so nothing outlives the engine.

    Args:
        home: where rollouts, batch journals, worktrees and the control socket live.
            None: `$SUBSESSIONS_HOME`, else `~/.subsessions`. It must not be writable by
            another user.
        model_client: what answers every model call of every session (e.g. `ScriptedModel`).
        model: the model id of sessions whose config and profile name none.
        model_provider: the provider name written to rollouts. None: the client's
            `provider` attribute, else its class name.
        profiles: the profiles children are spawned from, by name. None: the built-ins
            overlaid by the user's and then `project_dir`'s profile and agent files
            (`load_profiles`).
        project_dir: the project whose profiles are loaded. None: the current directory.
        mcp_servers: MCP servers (as `config.toml`'s `[mcp_servers]` tables) whose tools
            every session gets; each is started at the first session that needs it.
        mcp_source: what `mcp_servers` came from, as error messages name it.
        backend: where children run. None: in this process; `RayBackend` runs them on a
            Ray cluster.
        pace_collector: raise Python's garbage collector thresholds while many children
            live; False leaves the collector alone.
        tracer_provider: an OpenTelemetry tracer provider that gets GenAI spans of every
            task, model call and tool call. None: OpenTelemetry's global one, if set.
        capture_content: put prompts and outputs in those spans. None: as
            `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` says.

    Raises:
        InvalidArguments: `home` contains a NUL character.
        UnsafeHome: `home` is owned or writable by another user.
        ProfileError: with `profiles=None`, a profile file is malformed.
        ConfigError: `mcp_servers` is given but the MCP SDK is not installed, or, with
            `profiles=None`, the home's `config.toml` has malformed profile settings.
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
        backend: Backend | None = None,
        pace_collector: bool = True,
        tracer_provider: Any = None,
        capture_content: bool | None = None,
    ) -> None:
        home_path = Path(home) if home is not None else default_home()
        if "\0" in str(home_path):
            raise InvalidArguments("Engine", "home must be a path without NUL characters")
        secure_home(home_path)  # refuses, in one line, a home another user could write
        cwd = os.getcwd()
        self._sessions: dict[str, Session] = {}
        self._dispatcher: Dispatcher[Session] = Dispatcher()
        self._runtime = Runtime(
            home=home_path,
            cwd=cwd,
            model_client=model_client,
            model=model,
            model_provider=model_provider or str(
                getattr(model_client, "provider", type(model_client).__name__)
            ),
            profiles=(profiles if profiles is not None
                      else load_profiles(home_path, project_dir or cwd)),
            dispatcher=self._dispatcher,
            registered=self._sessions.__contains__,
            backend=backend or turns.IN_PROCESS,
            pace_collector=pace_collector,
            tracer=engine_tracer(tracer_provider, capture_content),  # (the [otel] extra)
        )
        self._mcp = McpSources(mcp_servers, mcp_source)  # started lazily, stopped at close
        self._closing: asyncio.Task[None] | None = None
        self._control: ControlServer | None = None  # opened by a config with control=True

    # -- what sessions share, read-only for hosts -------------------------------------------
    @property
    def runtime(self) -> Runtime:
        return self._runtime

    @property
    def home(self) -> Path:
        """The engine's home: rollouts, batch journals, worktrees, the control socket."""
        return self._runtime.home

    @property
    def cwd(self) -> str:
        return self._runtime.cwd

    @property
    def model_client(self) -> ModelClient:
        return self._runtime.model_client

    @property
    def model(self) -> str:
        """The model id of sessions whose config and profile name none."""
        return self._runtime.model

    @property
    def model_provider(self) -> str:
        return self._runtime.model_provider

    @property
    def profiles(self) -> Mapping[str, LoadedProfile]:
        """The profiles the engine was given or loaded, by name (a session's
        `custom_agents` add to them for its own tree only)."""
        return self._runtime.profiles

    @property
    def dispatcher(self) -> Dispatcher[Session]:
        return self._dispatcher

    @property
    def control_path(self) -> Path | None:
        """The control socket's path, once a session asked for one (`control=True`);
        None before."""
        return None if self._control is None else self._control.path

    async def _open_control(self, config: SessionConfig | None) -> None:
        """The control socket, opened once, by the first config that asks for it."""
        if config is None or not config.control or self._control is not None:
            return
        self.check_open()
        server = await ControlServer.open(self.home, self)
        if self._control is not None or self.closed:  # another opened it, or closing began
            await server.aclose()
            self.check_open()
            return
        self._control = server

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return (
            f"<Engine {state} home={str(self.home)!r} sessions={len(self._sessions)} "
            f"tasks={self._runtime.task_count}>"
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
        """True once `close()` has started: every later call that starts work raises
        `EngineClosed`."""
        return self._runtime.closed

    def check_open(self) -> None:
        self._runtime.check_open()

    async def create_session(
        self,
        config: SessionConfig | None = None,
        *,
        source: str = "exec",
        profile: str | Profile | None = None,
        session_id: str | None = None,
    ) -> Session:
        """A new top-level session, registered with the engine.

        Its rollout file is written only once it runs a task or spawns a child, so a
        session that does nothing leaves no file behind. An MCP server that cannot start
        does not refuse the session: its tools are missing and its rollout says why.

        Args:
            config: its tools, handlers, hooks and limits. None: `SessionConfig()`.
            source: how it was started, as its rollout records it (e.g. `exec`, `cli`).
            profile: a profile (or a profile's name) the session runs top-level: its
                instructions, and its persona and memory too (which a child of that
                profile never sees).
            session_id: the id it takes (a lowercase UUID a wire host chose). None: a new
                one.

        Returns:
            The session, registered with the engine until `destroy_session` or `close`.

        Raises:
            EngineClosed: the engine is closed or closing.
            InvalidArguments: `session_id` is not a lowercase UUID.
            SessionBusy: a session with that `session_id` is open or has a rollout
                already; resume it instead.
            UnknownSessionType: `profile` names no loaded profile nor one of the config's
                `custom_agents`.
            ConfigError: the config names MCP servers but the MCP SDK is not installed.
            ControlUnavailable: the config asks for a control socket (`control=True`) and
                it cannot be opened.
        """
        self.check_open()
        if session_id is not None:
            if not isinstance(session_id, str) or not is_session_id(session_id):
                raise InvalidArguments("create_session", "session_id must be a lowercase UUID")
            if session_id in OPEN_IN_THIS_PROCESS or _on_disk(self.home, session_id):
                raise SessionBusy(session_id, "already exists; resume it instead")
            OPEN_IN_THIS_PROCESS.add(session_id)  # held over the awaits: a second caller is refused
        try:
            session = await self._new_session(config, profile, source, session_id)
        except BaseException:
            if session_id is not None:
                OPEN_IN_THIS_PROCESS.discard(session_id)
            raise
        self._sessions[session.session_id] = session
        OPEN_IN_THIS_PROCESS.add(session.session_id)
        self.dispatcher.register(session)
        await self.dispatcher.invoke_hook(session, "on_session_start", {"source": source})
        return session

    async def _new_session(self, config: SessionConfig | None, profile: str | Profile | None,
                           source: str, session_id: str | None) -> Session:
        self._runtime.start_flusher()
        config, mcp_errors = await self._with_mcp(config)
        chosen = None
        if profile is not None:
            known = profile_namespace(self.profiles, config.custom_agents)
            chosen = resolve_profile(profile, known)
            config = derive_config(config, chosen)
        self.check_open()  # closing may have started while the MCP servers started
        await self._open_control(config)
        # No rollout yet: it starts with the first task or child, so a session that never
        # does anything (an MCP connection that only looked) leaves no empty file behind.
        session = Session.new(self._runtime, config, source=source, profile=chosen,
                              session_id=session_id)
        _note_unavailable(session, mcp_errors)
        return session

    async def resume_session(
        self, id_or_path: str | os.PathLike[str], config: SessionConfig | None = None
    ) -> Session:
        """Continue a session from its rollout, appending to the same file.

        Its children known from their rollouts can be waited for and sent follow-ups;
        spawns that were still queued when its process ended are queued again.

        Args:
            id_or_path: the session's id, a unique prefix of it, or its rollout's path.
            config: what a rollout cannot hold (tools, handlers, hooks, limits); the
                model, cwd and instructions it leaves unset come from the rollout. None:
                `SessionConfig()`.

        Returns:
            The session, registered with the engine.

        Raises:
            EngineClosed: the engine is closed or closing.
            UnknownSession: no rollout in the home has that id, or the prefix is ambiguous.
            RolloutError: the rollout cannot be read (a path that does not exist
                included), or is not a session's rollout.
            SessionBusy: the session is open in this engine or another engine of this
                process, or another process is still writing it (fork it instead).
            ControlUnavailable: `config` asks for a control socket and it cannot be opened.
            ConfigError: MCP servers are named but the MCP SDK is not installed.
        """
        self.check_open()
        path, rollout = resume.load(self.home, id_or_path)
        # two writers would interleave one file
        if rollout.session_id in self._sessions:
            raise SessionBusy(rollout.session_id, "is already open in this engine")
        if rollout.session_id in OPEN_IN_THIS_PROCESS:
            raise SessionBusy(rollout.session_id, "is open in another engine; fork it instead")
        resume.check_resumable(rollout)
        config, mcp_errors = await self._with_mcp(config)
        self.check_open()  # closing may have started while the MCP servers started
        await self._open_control(config)
        session = self.adopt(resume.rebuild(self._runtime, path, rollout, fork=False,
                                            config=config))
        _note_unavailable(session, mcp_errors)
        resume.requeue(session, rollout)  # its queued spawns wait (or start) again
        return session

    async def fork_session(
        self, id_or_path: str | os.PathLike[str], config: SessionConfig | None = None
    ) -> Session:
        """A new session that starts from a copy of another's history.

        It has a new id and a rollout of its own whose `session_meta` names
        `forked_from_id`; the original is left as it is, and may even be running.

        Args:
            id_or_path: the original's id, a unique prefix of it, or its rollout's path.
            config: what a rollout cannot hold (tools, handlers, hooks, limits); the
                model, cwd and instructions it leaves unset come from the rollout. None:
                `SessionConfig()`.

        Returns:
            The new session, registered with the engine.

        Raises:
            EngineClosed: the engine is closed or closing.
            UnknownSession: no rollout in the home has that id, or the prefix is ambiguous.
            RolloutError: the rollout cannot be read (a path that does not exist
                included), or is not a session's rollout.
            ControlUnavailable: `config` asks for a control socket and it cannot be opened.
            ConfigError: MCP servers are named but the MCP SDK is not installed.
        """
        self.check_open()
        path, rollout = resume.load(self.home, id_or_path)
        config, mcp_errors = await self._with_mcp(config)
        self.check_open()
        await self._open_control(config)
        session = self.adopt(resume.rebuild(self._runtime, path, rollout, fork=True,
                                            config=config))
        _note_unavailable(session, mcp_errors)
        return session

    async def _with_mcp(self, config: SessionConfig | None) -> tuple[SessionConfig,
                                                                       dict[str, str]]:
        """`config` with the tools of the engine's and its own MCP servers (started on first
        use), and the servers that could not start, with why."""
        config = config or SessionConfig()
        mcp_tools, mcp_errors = await self._mcp.tools(config)
        if mcp_tools:
            config = evolve(config, tools=(*config.tools, *mcp_tools))
        return config, dict(mcp_errors)

    def adopt(self, session: Session) -> Session:
        """Register a session built from disk (resume, fork) as top-level."""
        if session.session_id in self._sessions:
            raise SessionBusy(session.session_id, "is already open in this engine")
        self._runtime.start_flusher()
        self._sessions[session.session_id] = session
        OPEN_IN_THIS_PROCESS.add(session.session_id)
        self._dispatcher.register(session)
        return session

    def sessions(self) -> list[Session]:
        """The engine's top-level sessions, in the order they were registered (children
        are reached through their parents' `subsessions`)."""
        return list(self._sessions.values())

    def get_session(self, session_id: str) -> Session | None:
        """The top-level session with that id, or None (also for a child's id: see
        `resolve_session`)."""
        return self._sessions.get(session_id)

    def resolve_session(self, session_id: str) -> tuple[Session, bool]:
        """The top-level session that answers for a session id, child or not.

        Args:
            session_id: a top-level session's id, or the id of any descendant of one.

        Returns:
            The top-level session (the descendant's root for a child), and whether
            `session_id` is a child's.

        Raises:
            UnknownSession: no session of this engine has that id.
        """
        return self.dispatcher.resolve_session(session_id)

    async def destroy_session(self, session_id: str) -> None:
        """Abort a top-level session's task and descendants and forget it.

        Its rollouts stay on disk, so it can be resumed later. Its `on_session_end` hook
        runs with reason `destroy`; a `send_and_wait` waiting on it raises `EngineClosed`.

        Args:
            session_id: the top-level session's id.

        Raises:
            UnknownSession: no top-level session of this engine has that id (a child's
                id, or a session destroyed already).
            RolloutError: its last lines could not be written to its rollout.
        """
        session = self._sessions.pop(session_id, None)  # a second destroy finds nothing
        if session is None:
            raise UnknownSession(session_id)
        running = self._runtime.cancel_top_tasks(session_id)  # each aborts its children first
        if running:
            await asyncio.wait(running)
        await session.subsessions.abort_all_children()
        await self.dispatcher.invoke_hook(session, "on_session_end", {"reason": "destroy"})
        self.dispatcher.unregister(session_id)
        OPEN_IN_THIS_PROCESS.discard(session_id)
        session.close_events()
        await session.recorder.flush_durable()

    async def delete_session(self, session_id: str) -> None:
        """Destroy a top-level session (`destroy_session`), then delete its rollout and
        its descendants'.

        Args:
            session_id: the top-level session's id.

        Raises:
            UnknownSession: no top-level session of this engine has that id.
            RolloutError: its last lines could not be written before the files went.
        """
        session = self._sessions.get(session_id)
        if session is None:
            raise UnknownSession(session_id)
        paths = [s.recorder.path for s in session.subsessions.tree()] + [session.recorder.path]
        await self.destroy_session(session_id)
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)

    # -- shutdown ---------------------------------------------------------------------------
    async def close(self) -> None:
        """Abort every descendant, drain every task, write every rollout; idempotent.

        Hosts' `on_session_end` hooks get 5 seconds; tasks still running 10 seconds later
        are cancelled. The shutdown runs in a task of its own: a
        caller cancelled half-way (Ctrl-C) does not leave it half done, and every later
        `close()` waits for the same one. Called from inside one of the engine's own tasks
        (a tool handler), it returns at once and the shutdown cancels that task.
        """
        self._runtime.start_closing()
        if self._closing is None:
            self._closing = asyncio.get_running_loop().create_task(
                shut_down(self._runtime, self._sessions, self._dispatcher, self._control,
                          self._mcp, OPEN_IN_THIS_PROCESS), name="subsessions-close"
            )
        if self._runtime.owns(asyncio.current_task()):
            return  # called from inside the engine: the shutdown will cancel the caller
        await asyncio.shield(self._closing)


def _on_disk(home: Path, session_id: str) -> bool:
    try:
        find_rollout(home, session_id)
    except UnknownSession:
        return False
    return True


def _note_unavailable(session: Session, errors: dict[str, str]) -> None:
    for name, problem in errors.items():
        session.note(f"MCP server {name} is unavailable: {problem}")
