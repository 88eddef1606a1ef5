"""SubsessionManager: one per session; spawns, tracks, waits for and cancels its children.

The manager never builds a session: it asks its owner for each child (`new_child`), and
reads and changes each child's life through the child's own methods (its stop, its one
ending). Tree-wide limits and profiles live in the owner's `SessionTree`.

Its base `ChildBook` (`child_book.py`) holds the records, the waits and the cancels.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from subsessions._core import waits
from subsessions._core.child_book import ChildBook
from subsessions._core.kit import Kit
from subsessions._core.origin import NEW, Origin
from subsessions._core.spawning import Kits, consent, forked_items, isolation_of
from subsessions._core.tree import Reservation
from subsessions.batch import planning as batch_planning
from subsessions.batch.runner import BatchResult
from subsessions.budget import Budget
from subsessions.children import (
    Cancelled,
    Done,
    Ending,
    Failed,
    RunResult,
)
from subsessions.config import SessionConfig, filter_tools
from subsessions.errors import (
    InvalidArguments,
    SessionBusy,
    SubsessionError,
    error_text,
)
from subsessions.ids import new_session_id
from subsessions.profiles import Profile
from subsessions.rollouts import records
from subsessions.tools import worktrees
from subsessions.tools.schema import check_output_schema as check_schema
from subsessions.tools.schema import fork_turns_of

if TYPE_CHECKING:  # names only: sessions and children are made above
    from subsessions._core.conversation import Child, Conversation, Settle


_spawn_ids = itertools.count(1)


class SubsessionManager(ChildBook):
    """The children of one session. Limits are counted over the root's whole tree."""

    __slots__ = ("_kits", "_session", "_settle_one")

    def __init__(self, session: Conversation) -> None:
        super().__init__(session)
        self._session = session
        self._kits = Kits(session)  # what siblings of one profile share
        self._settle_one = self._settle  # every record's `on_ended` (one bound method)

    # -- profiles and tool definitions ------------------------------------------------------
    def profiles(self) -> dict[str, Profile]:
        """The profiles children of this tree can be spawned from, by name: the engine's,
        with the root's `custom_agents` added."""
        return self._session.tree.profiles()

    def tool_definitions(self, agent: str | Profile) -> list[dict[str, Any]]:
        """The definitions of this session's tools (the host's and MCP servers', not the
        engine's own) that an agent's allowlist admits.

        Args:
            agent: a profile, or a profile's name.

        Returns:
            One `{"name", "description", "parameters"}` dict per tool, in allowlist order:
            what that agent's model is told. Empty for an agent without an allowlist (it
            gets the session's whole list).

        Raises:
            UnknownSessionType: `agent` names no profile of this tree.
            InvalidArguments: `agent` is not a profile name or a `Profile`.
        """
        profile = self._kits.get(agent).profile
        if profile is None or profile.tools is None:
            return []
        return [
            {"name": t.name, "description": t.description, "parameters": t.parameters}
            for t in filter_tools(self._session.tools(), profile.tools)
        ]

    # -- spawning ---------------------------------------------------------------------------
    async def spawn_child(
        self,
        profile: str | Profile | SessionConfig,
        prompt: str,
        *,
        call_id: str | None = None,
        budget: Budget | None = None,
        fork_turns: int | str | None = None,
        output_schema: dict[str, Any] | None = None,
        isolation: str | None = None,
    ) -> str:
        """Start a child and return its id at once; it runs in a task the engine owns.

        Beyond the tree's `max_children` running children it waits in the tree's queue
        (status `queued`) and starts when a place frees, up to `max_queued` waiting spawns.
        The root's `on_spawn` hook is asked first.

        Args:
            profile: the profile (or its name) the child runs, or a `SessionConfig` used
                as given.
            prompt: the child's task.
            call_id: the tool call that spawned it, which its events name. None: one is
                made.
            budget: limits of its own: with its profile's, the tighter of each applies,
                clamped to what this session and the tree have left.
            fork_turns: "all", or N >= 1 (the last N turns): it starts from a copy of this
                session's conversation. None (or "none"): from its prompt alone.
            output_schema: a JSON Schema that makes it a typed child: it answers by
                calling `submit_result` with a value that validates, which `wait_child`
                returns.
            isolation: "worktree" runs it in a git worktree of its own, on a branch of its
                own. None (or "none"): the profile's choice, else this session's workspace.

        Returns:
            The child's session id.

        Raises:
            InvalidArguments: `prompt` is empty, or `budget`, `fork_turns`,
                `output_schema`, `isolation` or `profile` is malformed (`isolation` needs
                a profile, not a `SessionConfig`).
            UnknownSessionType: `profile` names no profile of this tree.
            EngineClosed: the engine is closed or closing.
            SessionBusy: this session is a child that has ended.
            SpawnDenied: the root's `on_spawn` hook refused (or failed).
            DepthLimitReached: this session is at the tree's `max_depth`.
            ChildLimitReached: `max_children` already run and spawns may not queue
                (`max_queued=0`).
            QueueFull: `max_children` run and `max_queued` spawns already wait.
            WorktreeUnavailable: a worktree child outside a git repository or with no
                commit to start from, or git is missing or failed.
        """
        fork_turns = fork_turns_of(fork_turns, "spawn_child")
        output_schema = check_schema(output_schema, "spawn_child")
        isolation = isolation_of(isolation, "spawn_child")
        if isolation is not None and isinstance(profile, SessionConfig):
            raise InvalidArguments("spawn_child", 'isolation "worktree" needs a profile, '
                                   "not a SessionConfig")
        parent = self._session
        runtime = parent.runtime
        runtime.check_open()
        self._check_can_start("start sub-sessions")
        if not isinstance(prompt, str) or not prompt.strip():
            raise InvalidArguments("spawn_child", "prompt must be a non-empty string")
        if budget is not None and not isinstance(budget, Budget):
            raise InvalidArguments("spawn_child", "budget must be a Budget or None")
        kit = self._kits.get(profile)
        if isolation is None and kit.profile is not None:
            isolation = kit.profile.isolation
        await consent(parent, kit, prompt, budget)  # the root's on_spawn, before any place
        tree = parent.tree
        call_id = call_id or f"spawn_{next(_spawn_ids)}"  # events always name the call
        child_id, worktree = new_session_id(), None
        if isolation == "worktree":
            worktree = await worktrees.add(parent.cwd, parent.runtime.home, child_id)
            kit = self._kits.in_worktree(kit, worktree)
        origin = NEW if fork_turns is None and output_schema is None and worktree is None else (
            Origin(history=() if fork_turns is None else forked_items(
                       parent.history, fork_turns, call_id),
                   forked_from=None if fork_turns is None else parent.session_id,
                   output_schema=output_schema, worktree=worktree))
        try:
            if tree.must_queue(parent.depth):  # beyond max_children: it waits its turn
                return self._enqueue(kit, prompt, call_id, budget, child_id, origin=origin)
            with await tree.reserve(parent.depth) as place:  # given back if it fails
                if not parent.is_child:  # a top-level rollout starts with its first task
                    parent.write_meta()
                record = self._child(kit, call_id, budget, child_id, origin=origin)
                self._launch(record, prompt, place)
        except Exception:
            if worktree is not None:  # it never started: nothing to inspect
                await worktrees.remove(worktree)
            raise
        return record.session_id

    def _child(self, kit: Kit, call_id: str, budget: Budget | None,
               session_id: str | None = None, *, queued: bool = False,
               origin: Origin = NEW) -> Child:
        """A child, not started (a requeued child keeps its id)."""
        child_id = session_id or new_session_id()
        return self._session.new_child(
            child_id, kit, call_id, budget, self._settle_one,
            partial(self._withdraw, child_id) if queued else None, origin)

    def _launch(self, record: Child, prompt: str, place: Reservation) -> None:
        parent, child = self._session, record
        runtime = parent.runtime
        runtime.spawn_task(child.run_child(prompt), f"subsession-{child.session_id}")
        place.commit()
        # The child's session_meta reaches the writer before the parent's line naming it
        # (and the writer puts a deeper file on disk first): no kill leaves the parent
        # naming a child that has no rollout.
        parent.recorder.before_flush(child.hand_over_head)
        self._children[child.session_id] = record
        parent.recorder.event(records.background(
            f"spawned child session {child.session_id} with model {child.model}"
        ))
        runtime.dispatcher.child_started(parent, child, child.call_id or "")

    # -- the queue ------------------------------------------------------------
    def _enqueue(self, kit: Kit, prompt: str, call_id: str, budget: Budget | None,
                 session_id: str | None = None, *, origin: Origin = NEW) -> str:
        """A spawn beyond max_children: its id now, its task and rollout when a place frees.
        The parent's rollout keeps what restarts it after a crash (`requeue`)."""
        parent = self._session
        if not parent.is_child:
            parent.write_meta()
        record = self._child(kit, call_id, budget, session_id, queued=True, origin=origin)
        child, child_id = record, record.session_id
        parent.tree.enqueue(child_id, partial(self._dequeued, record, prompt))
        self._children[child_id] = record
        parent.recorder.event({**records.background(f"queued child session {child_id}"),
                               "queued": {"session_type": child.agent_name or "custom",
                                          "prompt": prompt, "call_id": call_id,
                                          "budget": budget and budget.as_dict()}})
        return child_id

    def requeue(self, session_id: str, session_type: str, prompt: str, call_id: str,
                budget: Budget | None, messages: tuple[str, ...] = ()) -> None:
        """A spawn that was queued when its process ended (resume): queued again under
        its id with the messages sent to it meanwhile, and started now if there is room."""
        self._enqueue(self._kits.get(session_type), prompt, call_id, budget, session_id)
        for message in messages:
            self._hold_message(self._children[session_id], message)
        self._session.tree.start_queued()

    def _hold_message(self, record: Child, message: str) -> None:
        """A message to a queued child: read after its prompt, before its first model call.
        The parent's rollout keeps it, for a resume (`requeue`) and if it never starts."""
        record.inbox.append(message)
        self._session.recorder.event({**records.background(
            f"message to queued child session {record.session_id}"), "sent": message})

    def _dequeued(self, record: Child, prompt: str, place: Reservation) -> None:
        with place:
            record.dequeued()
            try:
                self._launch(record, prompt, place)
            except SubsessionError as exc:  # the engine is closing: it never starts
                self._settle(record, Failed(error_text(exc)), started=False)

    def _withdraw(self, child_id: str) -> None:
        """A queued child cancelled: it leaves the queue and ends cancelled, unstarted."""
        if self._session.tree.withdraw(child_id):
            record = self._children[child_id]
            record.inbox.clear()  # its task's, never read (its parent's rollout has them)
            self._settle(record, Cancelled(), started=False)

    def _check_can_start(self, what: str) -> None:
        parent = self._session
        if parent.is_child and parent.ended:
            raise SessionBusy(parent.session_id, f"has ended; it cannot {what}")

    # -- endings ----------------------------------------------------------------------------
    def _settle(self, record: Child, outcome: Ending, *, started: bool = True) -> None:
        """A child's ending is on disk (called from its own task's `finally`), or a queued
        child that never started ends."""
        record.settle(outcome)
        parent = self._session
        if started:
            parent.tree.child_ended()
        child, child_id = record, record.session_id
        if isinstance(outcome, Done):
            message = f"child session {child_id} completed"
        elif isinstance(outcome, Failed):
            message = f"child session {child_id} failed: {outcome.error}"
        else:
            message = f"child session {child_id} cancelled"
        if (worktree := child.left_worktree) is not None:
            message += f"; its worktree {worktree.path} on branch {worktree.branch} is kept"
        parent.recorder.event(records.background(message))
        if parent.is_child and parent.ended:
            parent.recorder.flush()  # an ended child flushes nothing more by itself
        if record.waiters:
            record.waited = True
        elif parent.config.notify_on_child_end:
            self._unnoticed.append(record)
        child.close_events()
        if started:  # (one that never started has no history: a follow-up starts it)
            parent.runtime.dispatcher.child_ended(parent, child, record.ending_data)
            child.release()  # its ending is on disk: what the API reports stays, history goes
        parent.wake()  # whether to is Session.wake's to decide (wake_on_child_end, idle)

    def adopt_ended(self, make: Callable[[Settle], Child]) -> None:
        """Know a child that ended in an earlier run (resume), made by `make` given how it
        settles here: it can be waited for, and sent a follow-up."""
        record = make(self._settle_one)
        self._children[record.session_id] = record

    def tree(self) -> list[Conversation]:
        """Every descendant session, depth first."""
        found: list[Conversation] = []
        for child in self._children.values():
            found.append(child)
            family = child.spawned
            if family is not None:
                found.extend(family.tree())
        return found

    # -- composition ------------------------------------------------------------------------
    async def run_parallel(
        self, tasks: list[waits.RunTask], timeout: float | None = None,
        *, call_id: str | None = None,
    ) -> RunResult:
        """Spawn every task at once and wait for all of them.

        A task that cannot be spawned (a limit, an unknown profile) fails alone: its step
        has no child and says why, and the others run.

        Args:
            tasks: `(profile, prompt)` pairs, or `(profile, prompt, options)` with
                `fork_turns` and `output_schema` options as `spawn_child` takes them.
            timeout: seconds to wait for them, at most an hour. None: no limit.
            call_id: the tool call that ran them, which their events name.

        Returns:
            One step per task, in task order; on timeout `timed_out` is set and the
            children still running go on (their steps show them running).

        Raises:
            InvalidArguments: `tasks` is malformed, or `timeout` is not a number of
                seconds.
        """
        return await waits.run_parallel(self, tasks, timeout, call_id=call_id)

    async def run_chain(
        self, tasks: list[waits.RunTask], timeout: float | None = None,
        *, call_id: str | None = None,
    ) -> RunResult:
        """Run tasks one after another, each prompt's `{previous}` replaced by the last
        step's result (a typed step's as JSON).

        Args:
            tasks: `(profile, prompt)` pairs, or `(profile, prompt, options)` with
                `fork_turns` and `output_schema` options as `spawn_child` takes them.
            timeout: seconds for the whole chain, at most an hour. None: no limit.
            call_id: the tool call that ran them, which their events name.

        Returns:
            The steps that ran. The chain stops at the first step that cannot be
            spawned, does not complete, or is still running at the timeout (that child goes
            on); `failed_step` is its index and `timed_out` says whether time ran out.

        Raises:
            InvalidArguments: `tasks` is malformed, or `timeout` is not a number of
                seconds.
        """
        return await waits.run_chain(self, tasks, timeout, call_id=call_id)

    async def run_batch(
        self, session_type: str, items_path: str | os.PathLike[str], prompt: str,
        output_path: str | os.PathLike[str], max_concurrency: int | None = None,
        budget: Budget | None = None, *, resume: str | None = None,
        inside_workspace: bool = False, call_id: str | None = None,
        output_schema: dict[str, Any] | None = None, fork_turns: int | str | None = None,
    ) -> BatchResult:
        """Run one child per item of a CSV or JSONL file, writing each result to an output
        file.

        The batch is checked whole before anything runs, and journaled under the home's
        `batches/`, so an interrupted one can be resumed. Children that end are not kept
        in `children()`.

        Args:
            session_type: the profile every item's child runs.
            items_path: the `.csv` or `.jsonl` input, one item a row or line. Relative to
                this session's cwd.
            prompt: the prompt template: `{name}` stands for the item's field `name`.
            output_path: where the results go: a `.csv` or `.jsonl` file. Relative to this
                session's cwd.
            max_concurrency: children running at once, at least 1 (None: 16, or the
                journal's on a resume).
            budget: limits for each item's child.
            resume: a batch id: run that batch's unfinished items again, with this call's
                `max_concurrency` and `budget` (the journal's budget when None); the other
                arguments are the journal's.
            inside_workspace: both paths must lie inside this session's cwd, and the
                output not in the engine's home.
            call_id: the tool call that ran it, which its events name.
            output_schema: a JSON Schema that makes every item's child typed.
            fork_turns: every item's child starts from a copy of this session's
                conversation, as with `spawn_child`.

        Returns:
            The batch's id, counts, output and journal paths, and its first failures.

        Raises:
            UnknownSessionType: a new batch's `session_type` names no profile of this tree.
            InvalidArguments: `output_schema` or `fork_turns` is malformed.
            BatchError: the input, template, paths, `max_concurrency` or journal are
                unusable, or a resumed batch's input changed (nothing was started).
        """
        cwd = Path(self._session.cwd)
        return await batch_planning.run_batch(
            self, self._session.runtime.home, session_type, items_path, prompt, output_path,
            max_concurrency=max_concurrency, budget=budget, resume=resume, cwd=cwd,
            workspace=cwd if inside_workspace else None, call_id=call_id,
            output_schema=output_schema, fork_turns=fork_turns_of(fork_turns, "run_batch"))

    # -- messages --------------------------------------------------------------------------
    async def send_message(self, session_id: str, message: str) -> str:
        """Send a child a message, which its running task reads or a follow-up task takes
        as its prompt.

        Args:
            session_id: the child's id.
            message: the text for the child's model.

        Returns:
            `"queued"`: the child runs (or waits queued), and reads the message before its
            next (first) model call. `"started"`: the child had ended, and a follow-up task
            on the same history and rollout started, which `wait_child` then waits for.

        Raises:
            UnknownSession: `session_id` is not a child of this session.
            InvalidArguments: `message` is empty.
            EngineClosed: a follow-up is needed and the engine is closed or closing.
            SessionBusy: a follow-up is needed and this session is a child that has ended.
            ChildLimitReached: a follow-up is needed and `max_children` already run (a
                follow-up never queues).
            WorktreeUnavailable: the child's removed worktree cannot be made again.
        """
        record = self._lookup(session_id)
        if not isinstance(message, str) or not message.strip():
            raise InvalidArguments("send_message", "message must be a non-empty string")
        while True:
            if record.withdraw is not None:  # queued: never wait for it to start
                self._hold_message(record, message)
                return "queued"
            if record.accepting and await record.take_message(message):
                return "queued"
            if not record.settled:  # ending now: the message starts what follows
                await asyncio.wait((record.finished,))
                continue
            if record.worktree is not None and record.worktree_removed:
                self._session.runtime.check_open()  # refused now: nothing made to leave
                self._check_can_start("send messages to its sub-sessions")
                await worktrees.again(record.worktree)  # where its history says it works
                record.worktree_removed = False
                continue
            self._follow_up(record, message)
            return "started"

    def _follow_up(self, record: Child, message: str) -> None:
        parent = self._session
        runtime = parent.runtime
        runtime.check_open()
        self._check_can_start("send messages to its sub-sessions")
        child = record
        with parent.tree.reserve_follow_up() as place:
            child.prepare_follow_up()
            runtime.spawn_task(child.run_child(message),
                               f"subsession-{child.session_id}")
            place.commit()
        record.restart()
        if record in self._unnoticed:  # its earlier ending needs no notice any more
            self._unnoticed.remove(record)
        runtime.dispatcher.child_started(parent, child, child.call_id or "")
