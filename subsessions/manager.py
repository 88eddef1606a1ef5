"""SubsessionManager: one per session; spawns, tracks, waits for and cancels its children."""

from __future__ import annotations

import asyncio
import itertools
import time
from functools import partial
from typing import TYPE_CHECKING, Any

from attrs import evolve

from subsessions import composition
from subsessions.children import (
    MAX_WAIT_SECONDS,
    STATUS_OF,
    Cancelled,
    ChildInfo,
    ChildState,
    ChildStatus,
    Done,
    Failed,
    Pending,
    RunResult,
    WaitResult,
    checked_seconds,
)
from subsessions.config import SessionConfig, filter_tools
from subsessions.errors import (
    ChildCancelled,
    ChildFailed,
    ChildLimitReached,
    ChildNotFinished,
    ChildTimeout,
    DepthLimitReached,
    InvalidArguments,
    SessionBusy,
    UnknownSession,
    UnknownSessionType,
    error_text,
)
from subsessions.profiles import Profile

if TYPE_CHECKING:
    from subsessions.session import Session

_spawn_ids = itertools.count(1)


class _Child:
    __slots__ = ("cancel_requested", "ended_at", "finished", "session", "state", "waited",
                 "waiters")

    def __init__(self, session: Session, state: ChildState) -> None:
        self.session = session
        self.state = state
        self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if not isinstance(state, Pending):
            self.finished.set_result(None)
        self.ended_at: float | None = None
        self.cancel_requested = False
        self.waiters = 0  # waits in progress: an ending they see needs no notice
        self.waited = False  # the parent has been told how this child ended

    def cancel(self) -> None:
        """Cancel the task once: a second cancel would interrupt its own clean-up."""
        if isinstance(self.state, Pending) and not self.cancel_requested:
            self.cancel_requested = True
            self.state.task.cancel()

    def info(self) -> ChildInfo:
        state = self.state
        return ChildInfo(
            session_id=self.session.session_id,
            session_type=self.session.agent_name or "custom",
            status=STATUS_OF[type(state)],
            model=self.session.model,
            result=state.result if isinstance(state, Done) else None,
            error=state.error if isinstance(state, Failed) else None,
            started_at=self.session.started_at,
            ended_at=self.ended_at,
            rollout_path=self.session.recorder.path,
            usage=self.session.usage(),
            answering_model=self.session.answering_model,
        )


class SubsessionManager:
    """The children of one session. Limits are counted over the root's whole tree."""

    __slots__ = ("_child_configs", "_children", "_profiles", "_running_in_tree", "_session",
                 "_specs", "_unnoticed", "spec_cache")

    def __init__(self, session: Session) -> None:
        self._session = session
        self._children: dict[str, _Child] = {}
        self._running_in_tree = 0  # kept on the root's manager only
        self._profiles: dict[str, Profile] | None = None  # root only, built on first use
        self._specs: tuple[dict[str, Any], ...] | None = None  # root only
        self._child_configs: dict[str | Profile, tuple[Profile, SessionConfig]] = {}
        # root only: tool specs by (config id, profile, depth), with the config kept alive
        self.spec_cache: dict[tuple[int, Profile | None, int], tuple[Any, tuple[Any, ...]]] = {}
        self._unnoticed: list[_Child] = []  # ended children the parent was not told of yet

    def __repr__(self) -> str:
        counts: dict[str, int] = {}
        for child in self._children.values():
            key = STATUS_OF[type(child.state)].value
            counts[key] = counts.get(key, 0) + 1
        return f"<SubsessionManager of {self._session.session_id} {counts}>"

    # -- profiles and tool specs, shared by the whole tree ---------------------------------
    def profiles(self) -> dict[str, Profile]:
        """The profiles children of this tree can be spawned from, by name."""
        root = self._session.root.subsessions
        if root._profiles is None:
            found = {name: lp.profile for name, lp in self._session.engine.profiles.items()}
            found.update({p.name: p for p in self._session.root.config.custom_agents})
            root._profiles = dict(sorted(found.items()))
        return root._profiles

    def tool_definitions(self, agent: str | Profile) -> list[dict[str, Any]]:
        """The definitions (name, description, parameters) of this session's tools that an
        agent's allowlist admits, in allowlist order: what that agent's model is told.
        Nothing for an agent without an allowlist: it sees the session's whole list anyway."""
        profile = self._child_config(agent)[0]
        if profile.tools is None:
            return []
        return [
            {"name": t.name, "description": t.description, "parameters": t.parameters}
            for t in filter_tools(self._session.tools(), profile.tools)
        ]

    def tree_tool_specs(self) -> tuple[dict[str, Any], ...]:
        from subsessions.handlers.subsessions import tool_specs

        root = self._session.root.subsessions
        if root._specs is None:
            root._specs = tool_specs(self.profiles())
        return root._specs

    # -- spawning ---------------------------------------------------------------------------
    async def spawn_child(
        self,
        profile: str | Profile | SessionConfig,
        prompt: str,
        *,
        call_id: str | None = None,
    ) -> str:
        """Queue a child and return its id at once; it runs in an engine-owned task."""
        from subsessions.session import Session

        parent = self._session
        engine = parent.engine
        engine.check_open()
        if parent.parent is not None and parent.wrote_end:
            raise SessionBusy(parent.session_id, "has ended; it cannot start sub-sessions")
        if not isinstance(prompt, str) or not prompt.strip():
            raise InvalidArguments("spawn_child", "prompt must be a non-empty string")
        if not isinstance(profile, str | Profile):  # a SessionConfig (used as given) or junk
            chosen, config = self._child_config(profile)
        else:  # same profile, same parent: same derived config
            derived = self._child_configs.get(profile)
            if derived is None:
                derived = self._child_configs[profile] = self._child_config(profile)
            chosen, config = derived
        root = parent.root
        if parent.depth >= root.config.max_depth:
            raise DepthLimitReached(root.config.max_depth)
        tree = root.subsessions
        if tree._running_in_tree >= root.config.max_children:
            raise ChildLimitReached(root.config.max_children)
        call_id = call_id or f"spawn_{next(_spawn_ids)}"  # events always name a spawning call
        source = {
            "subsession": {
                "parent_session_id": parent.session_id,
                "depth": parent.depth + 1,
                "session_type": chosen.name,
                "call_id": call_id,
            }
        }
        context = parent.child_tool_context()
        if parent.parent is None:  # a top-level rollout starts with its first task or child
            parent.write_meta()
        child = Session(engine, config, parent=parent, profile=chosen, call_id=call_id,
                        source=source, tool_context=context)
        task = engine.spawn_task(child.run_task(prompt), f"subsession-{child.session_id}")
        # The child's session_meta reaches the writer before the parent's line naming it
        # (and the writer puts a deeper file on disk first): no kill leaves the parent
        # naming a child that has no rollout.
        parent.recorder.before_flush(partial(_hand_over_head, child))
        record = _Child(child, Pending(task))
        self._children[child.session_id] = record
        tree._running_in_tree += 1
        parent.recorder.event(
            {
                "type": "background_event",
                "message": f"spawned child session {child.session_id} with model {child.model}",
            }
        )
        task.add_done_callback(partial(self._on_task_done, record))
        engine.dispatcher.child_started(parent, child, call_id)
        return child.session_id

    def _child_config(
        self, profile: str | Profile | SessionConfig
    ) -> tuple[Profile, SessionConfig]:
        if isinstance(profile, SessionConfig):
            label = Profile(name="custom", developer_instructions=profile.instructions or "",
                            max_turns=profile.max_turns)
            parent = self._session
            return label, evolve(profile, model=profile.model or parent.model,
                                 cwd=profile.cwd or parent.cwd)
        if isinstance(profile, str):
            known = self.profiles()
            if profile not in known:
                raise UnknownSessionType(profile, tuple(known))
            profile = known[profile]
        if not isinstance(profile, Profile):
            raise InvalidArguments(
                "spawn_child", "profile must be a profile name, a Profile or a SessionConfig"
            )
        chosen = profile.child_view()
        return chosen, self._session.child_config(chosen)

    # -- endings ----------------------------------------------------------------------------
    def _on_task_done(self, record: _Child, task: asyncio.Task[str | None]) -> None:
        outcome: ChildState
        if task.cancelled():
            outcome = Cancelled()
        elif (exc := task.exception()) is not None:
            outcome = Failed(error_text(exc))
        else:
            outcome = Done(task.result())
        child = record.session
        if not child.started_task:  # cancelled before its first step: still one whole rollout
            child.write_meta()
            child.recorder.event({"type": "turn_aborted", "reason": "cancelled"})
            child.wrote_end = True
            for grandchild in child.subsessions._children.values():
                grandchild.cancel()  # its own clean-up never ran: end what it started
        settle = partial(self._settle, record, outcome)
        try:
            child.recorder.flush_then(settle)  # settled once the ending is on disk
        except RuntimeError:  # writer already closed: nothing more can reach the disk
            settle(None)

    def _settle(self, record: _Child, outcome: ChildState, error: Exception | None) -> None:
        if error is not None and isinstance(outcome, Done):
            outcome = Failed(str(error))  # the result never reached the disk
        record.state = outcome
        record.ended_at = time.time()
        self._session.root.subsessions._running_in_tree -= 1
        child = record.session
        child_id = child.session_id
        if isinstance(outcome, Done):
            message = f"child session {child_id} completed"
        elif isinstance(outcome, Failed):
            message = f"child session {child_id} failed: {outcome.error}"
        else:
            message = f"child session {child_id} cancelled"
        parent = self._session
        parent.recorder.event({"type": "background_event", "message": message})
        if parent.parent is not None and parent.wrote_end:
            parent.recorder.flush()  # an ended child flushes nothing more by itself
        record.finished.set_result(None)
        if record.waiters:
            record.waited = True
        elif self._session.config.notify_on_child_end:
            self._unnoticed.append(record)
        child.events.close()
        self._session.engine.dispatcher.child_ended(
            self._session, child, partial(_ending_data, record, outcome)
        )
        child.release()  # its ending is on disk: what the API reports stays, the history goes

    # -- queries ----------------------------------------------------------------------------
    def _lookup(self, session_id: str) -> _Child:
        record = self._children.get(session_id) if isinstance(session_id, str) else None
        if record is None:
            raise UnknownSession(str(session_id))
        return record

    def status(self, session_id: str) -> ChildStatus:
        return STATUS_OF[type(self._lookup(session_id).state)]

    def info(self, session_id: str) -> ChildInfo:
        return self._lookup(session_id).info()

    def children(self) -> list[ChildInfo]:
        """Every child of this session, oldest first."""
        return [child.info() for child in self._children.values()]

    def adopt_ended(self, child: Session, state: ChildState, ended_at: float | None) -> None:
        """Know a child that ended in an earlier run (resume): it can be waited for."""
        child.release()  # run again, it reloads its history from its rollout
        record = _Child(child, state)
        record.ended_at = ended_at
        self._children[child.session_id] = record

    def tree(self) -> list[Session]:
        """Every descendant session, depth first."""
        found: list[Session] = []
        for child in self._children.values():
            found.append(child.session)
            found.extend(child.session.subsessions.tree())
        return found

    def running(self) -> list[str]:
        return [cid for cid, child in self._children.items() if not child.finished.done()]

    # -- waiting and cancelling -------------------------------------------------------------
    async def wait_child(self, session_id: str, timeout: float | None = None) -> str | None:
        """The child's last assistant message. `None` waits forever, `<= 0` does not wait."""
        seconds = checked_seconds("wait_child", timeout)
        label = 0 if seconds is None or seconds <= 0 else max(1, round(seconds * 1000))
        return await self._wait(session_id, seconds, label)

    async def wait_child_ms(self, session_id: str, timeout_ms: int | None) -> str | None:
        """`wait_child` in milliseconds, as the `wait_session` tool takes it."""
        seconds = None if timeout_ms is None else min(timeout_ms / 1000, MAX_WAIT_SECONDS)
        return await self._wait(session_id, seconds, timeout_ms or 0)

    async def _wait(self, session_id: str, seconds: float | None, label_ms: int) -> str | None:
        record = self._lookup(session_id)
        if not record.finished.done():
            if seconds is not None and seconds <= 0:
                raise ChildNotFinished(session_id)
            await self._await_children([record], seconds, every=True)
            if not record.finished.done():
                raise ChildTimeout(session_id, label_ms)
        record.waited = True
        state = record.state
        if isinstance(state, Done):
            return state.result
        if isinstance(state, Failed):
            raise ChildFailed(session_id, state.error)
        raise ChildCancelled(session_id)

    async def _await_children(
        self, records: list[_Child], seconds: float | None, *, every: bool
    ) -> None:
        """Wait for the first (or every) one of `records` to settle, or for the timeout."""
        pending = [r.finished for r in records if not r.finished.done()]
        if not pending or (seconds is not None and seconds <= 0):
            return
        if not every and len(pending) < len(records):
            return  # one has ended already
        for record in records:
            record.waiters += 1
        try:
            when = asyncio.ALL_COMPLETED if every else asyncio.FIRST_COMPLETED
            await asyncio.wait(pending, timeout=seconds, return_when=when)
        finally:
            for record in records:
                record.waiters -= 1

    async def wait_any(self, session_ids: list[str], timeout: float | None = None) -> WaitResult:
        """Return once one of the children has ended (with all that ended by then)."""
        return await self._wait_many(session_ids, timeout, every=False)

    async def wait_all(self, session_ids: list[str], timeout: float | None = None) -> WaitResult:
        """Return once every child has ended, or at the timeout with what has ended so far."""
        return await self._wait_many(session_ids, timeout, every=True)

    async def _wait_many(
        self, session_ids: list[str], timeout: float | None, *, every: bool
    ) -> WaitResult:
        if isinstance(session_ids, str) or not all(isinstance(i, str) for i in session_ids):
            raise InvalidArguments("wait_any/wait_all", "session_ids must be a list of ids")
        seconds = checked_seconds("wait_any/wait_all", timeout)
        known = {i: self._children[i] for i in dict.fromkeys(session_ids) if i in self._children}
        unknown = tuple(i for i in dict.fromkeys(session_ids) if i not in self._children)
        records = list(known.values())
        await self._await_children(records, seconds, every=every)
        ended = [r for r in records if r.finished.done()]
        for record in ended:
            record.waited = True
        satisfied = len(ended) == len(records) if every else bool(ended) or not records
        return WaitResult(
            children={cid: r.info() for cid, r in known.items()},
            unknown=unknown,
            timed_out=not satisfied,
        )

    @property
    def has_children(self) -> bool:
        return bool(self._children)

    @property
    def has_notices(self) -> bool:
        return bool(self._unnoticed)

    # -- composition ------------------------------------------------------------------------
    async def run_parallel(
        self, tasks: list[tuple[str | Profile, str]], timeout: float | None = None,
        *, call_id: str | None = None,
    ) -> RunResult:
        """Spawn every task at once; results in task order (pending ones on timeout)."""
        return await composition.run_parallel(self, tasks, timeout, call_id=call_id)

    async def run_chain(
        self, tasks: list[tuple[str | Profile, str]], timeout: float | None = None,
        *, call_id: str | None = None,
    ) -> RunResult:
        """Run tasks one after another, `{previous}` in a prompt being the last result;
        stop at the first step that does not complete."""
        return await composition.run_chain(self, tasks, timeout, call_id=call_id)

    def take_notices(self) -> list[ChildInfo]:
        """Children that ended unseen since the last call; each is returned once."""
        notices = [r.info() for r in self._unnoticed if not r.waited]
        for record in self._unnoticed:
            record.waited = True
        self._unnoticed.clear()
        return notices

    async def cancel_child(self, session_id: str) -> bool:
        """Cancel a running child (its children first); False if it had already ended."""
        record = self._lookup(session_id)
        if record.finished.done():
            return False
        record.cancel()
        await asyncio.wait((record.finished,))
        return isinstance(record.state, Cancelled)

    def mark_seen(self, session_id: str) -> None:
        """The model learned how this child ended (e.g. from cancel_session): no notice."""
        self._lookup(session_id).waited = True

    async def abort_all_children(self) -> None:
        """Cancel every running child and wait until each has settled."""
        pending = [child for child in self._children.values() if not child.finished.done()]
        for child in pending:
            child.cancel()
            child.waited = True
        if pending:
            await asyncio.wait([child.finished for child in pending])


def _ending_data(record: _Child, outcome: ChildState) -> dict[str, Any]:
    """The `subagent.completed` / `subagent.failed` payload: built only for listeners."""
    child = record.session
    ended = record.ended_at or time.time()
    data: dict[str, Any] = {
        "tool_call_id": child.call_id, "agent_name": child.agent_name,
        "remote_session_id": child.session_id, "model": child.model,
        "total_tokens": child.token_usage.total_tokens, "total_tool_calls": child.tool_calls,
        "turns": child.turns, "duration_ms": round((ended - child.started_at) * 1000),
    }
    if not isinstance(outcome, Done):
        data["error"] = outcome.error if isinstance(outcome, Failed) else "cancelled"
        data["cancelled"] = isinstance(outcome, Cancelled)
    return data


def _hand_over_head(child: Session) -> None:
    """A spawned child's first lines to the writer, before its parent's line naming it."""
    child.write_meta()
    child.recorder.flush()
