"""SessionState: a conversation's identity, state and counters (a top-level session's or a
child's), as the manager, the task loop, the dispatcher and the hosts read and change them;
`Conversation` adds what both kinds do, `Session` (top-level) and `Child` the rest.

What it shares with the engine's other sessions comes from the `Runtime` it is given;
what it shares with its tree from the `SessionTree`; its tools from its `Kit`.

SessionParts, its base: the parts of a session made only when needed (its event hub at the
first listener; its children, inbox, mailbox and notes in `Extras`), so a child nobody
hears, that never spawns nor is sent a message, carries two empty slots.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

from attrs import define

from subsessions._core.kit import Kit, own_kit
from subsessions._core.meter import Meter
from subsessions._core.origin import NEW as NEW
from subsessions._core.origin import Origin as Origin
from subsessions._core.origin import Phase as Phase
from subsessions._core.runtime import Runtime
from subsessions._core.tree import SessionTree
from subsessions._core.typed import Typed
from subsessions.budget import Budget
from subsessions.children import CANCEL, Stop
from subsessions.config import SessionConfig, Tool
from subsessions.errors import BudgetExhausted
from subsessions.events import EventHub, listening
from subsessions.ids import new_session_id
from subsessions.items import Item
from subsessions.profiles import Profile
from subsessions.rollouts.recorder import RolloutRecorder, rollout_path
from subsessions.tools import ToolContext
from subsessions.tools.context import sandbox_policy
from subsessions.usage import Usage

if TYPE_CHECKING:  # a name only: a session makes its manager when first asked
    from subsessions._core.manager import SubsessionManager


@define(eq=False)
class Extras:
    """What few sessions ever need, made at the first use of one of them."""

    subsessions: SubsessionManager | None = None  # its children (made when first asked for)
    inbox: list[str] | None = None  # sent while it runs, read before its next model call
    mailbox: Callable[[str], Awaitable[bool]] | None = None  # its remote task's inbox
    elsewhere: dict[str, Usage] | None = None  # descendants run by another process (Ray)
    child_context: ToolContext | None = None  # its workspace as its children get it
    notes: tuple[dict[str, Any], ...] = ()  # noted before there was a rollout
    forked_from: str | None = None  # the session a fork starts from
    copied: int = 0  # the items a fork copied, at the head of its history
    typed: Typed | None = None  # a typed child's schema and tries (`output_schema`)
    resume_report: str | None = None  # what resuming or forking read and skipped


class SessionParts:
    """The base of `SessionState`: what it makes on demand."""

    __slots__ = ("_events", "_events_closed", "_extras")

    session_id: str
    call_id: str | None
    parent: SessionParts | None

    def __init__(self, extras: Extras | None, hub: bool) -> None:
        # a top-level session's hub at once, a child's at its first listener (`events`)
        self._events = EventHub(self.session_id, None, None) if hub else None
        self._events_closed = False  # a hub made after `close_events` is made closed
        self._extras = extras

    @property
    def spawned(self) -> SubsessionManager | None:
        """Its children's manager if it was ever asked for (readers make none)."""
        extras = self._extras
        return None if extras is None else extras.subsessions

    @property
    def extras(self) -> Extras:
        """What few sessions need (made at first use)."""
        extras = self._extras
        if extras is None:
            extras = self._extras = Extras()
        return extras

    @property
    def typed(self) -> Typed | None:
        """A typed child's state: it answers through `submit_result` (None: untyped)."""
        extras = self._extras
        return None if extras is None else extras.typed

    @property
    def forked_from(self) -> str | None:
        extras = self._extras
        return None if extras is None else extras.forked_from

    @property
    def copied(self) -> int:
        """The items at the head of its history that a fork copied (siblings share them)."""
        extras = self._extras
        return 0 if extras is None else extras.copied

    @property
    def resume_report(self) -> str | None:
        """What resuming or forking it read and skipped (None: it was not resumed)."""
        extras = self._extras
        return None if extras is None else extras.resume_report

    @property
    def mailbox(self) -> Callable[[str], Awaitable[bool]] | None:
        """Where messages for its task go while the task runs in another process."""
        extras = self._extras
        return None if extras is None else extras.mailbox

    @mailbox.setter
    def mailbox(self, mailbox: Callable[[str], Awaitable[bool]] | None) -> None:
        if mailbox is not None or self._extras is not None:
            self.extras.mailbox = mailbox

    @property
    def events(self) -> EventHub:
        """Its event hub, chained to its parent's (made at first use)."""
        hub = self._events
        if hub is None:
            parent = self.parent
            hub = self._events = EventHub(
                self.session_id, parent.events if parent is not None else None, self.call_id)
            if self._events_closed:
                hub.close()
        return hub

    @property
    def heard(self) -> bool:
        """Whether an event of it would reach anyone: its hub's listeners or an ancestor's
        (asked before an event is built, so a child nobody hears makes no hub)."""
        hub = self._events
        if hub is not None:
            return listening(hub)
        parent = self.parent
        return parent is not None and parent.heard

    def close_events(self) -> None:
        """It has ended: its streams end (a hub made later is made closed)."""
        self._events_closed = True
        if self._events is not None:
            self._events.close()

    @property
    def inbox(self) -> list[str]:
        """Messages sent to it while it runs, read before its next model call."""
        extras = self.extras
        inbox = extras.inbox
        if inbox is None:
            inbox = extras.inbox = []
        return inbox

    @property
    def has_mail(self) -> bool:
        """A message waits in its inbox (asked without making one)."""
        extras = self._extras
        return extras is not None and bool(extras.inbox)

    async def take_message(self, message: str) -> bool:
        """A message for its running task, read before its next model call; False when the
        task will not read it any more (a task running elsewhere says so)."""
        mailbox = self.mailbox
        if mailbox is not None:
            return await mailbox(message)
        self.inbox.append(message)
        return True


class SessionState(SessionParts):
    """One conversation's state (a top-level session or a child): see `Conversation`."""

    # Slots: past 30 attributes an instance's values become a full dict (1.7 KiB a child).
    __slots__ = (
        "_meter", "_phase", "_task", "answered_by", "begun", "call_id", "cwd", "depth",
        "history", "instructions", "kit", "last_message", "max_turns", "model", "parent",
        "recorder", "root", "runtime", "session_id", "source", "stop", "taking_messages",
        "token_usage", "tool_calls", "tree", "turns",
    )

    parent: SessionState | None

    def __init__(
        self,
        runtime: Runtime,
        config: SessionConfig,
        *,
        parent: SessionState | None = None,
        profile: Profile | None = None,
        call_id: str | None = None,
        source: str | dict[str, Any] = "exec",
        origin: Origin = NEW,
        budget: Budget | None = None,  # a child's, asked for at spawn (besides its config's)
        kit: Kit | None = None,  # a child's, shared with its siblings (`child_kit`)
        session_id: str | None = None,  # a child's, chosen by its parent (else `origin`'s)
    ) -> None:
        self.session_id = session_id or origin.session_id or new_session_id()
        """Its id, a lowercase uuid7 (so rollouts sort by creation time); the engine, the
        tools and the rollout files know it by this."""
        # its counters (what its tasks ran up; a shard's child: its earlier tasks' too)
        self.begun = origin.started_at or time.time()
        self.token_usage = origin.token_usage
        self.turns, self.tool_calls = origin.counts
        self.answered_by: str | None = None  # the model that answered last
        self.last_message: str | None = None  # its last assistant message
        self.runtime = runtime
        if kit is not None:
            config, profile = kit.config, kit.profile
        self.parent = parent
        self.root: SessionState = parent.root if parent is not None else self
        self.tree: SessionTree = (
            parent.tree if parent is not None
            else SessionTree(config, runtime.profiles, ledger=origin.ledger)
        )
        self.depth: int = parent.depth + 1 if parent is not None else 0
        """How deep it is in its tree: 0 for a top-level session, 1 for its children, and
        so on; a session at the tree's `max_depth` cannot spawn."""
        self.call_id = call_id
        self.source = source
        self.model = config.model or runtime.model
        self.instructions = config.instructions or ""
        self.cwd = config.cwd or runtime.cwd
        self.max_turns = profile.max_turns if profile is not None else config.max_turns
        self.history: list[Item] = list(origin.history)
        # its meter: a child's only when a budget applies to it or an ancestor (`meter`)
        self._meter: Meter | None = None
        if parent is None:
            self._meter = self.tree.root_meter(self.stop_for_budget)
        else:
            limits = budget.clamp(config.budget) if budget else config.budget
            if limits is not None or parent.metered:
                self._meter = self.tree.child_meter(parent.meter, limits, self.stop_for_budget)
        self.stop: Stop | None = None  # the first stop asked of its current task
        # sent while it runs, read before its next call (made at the first message)
        self.taking_messages = parent is not None  # a queued child reads its inbox first
        self._task: asyncio.Task[object] | None = None  # its task, from its first line
        self.recorder = RolloutRecorder(
            runtime.writer,
            origin.rollout_path or rollout_path(runtime.home, self.session_id, self.begun),
            runtime.unwritten,
            self.depth,
        )
        # a child's is given (shared with its siblings); a top-level session's is its own
        self.kit = kit if kit is not None else own_kit(
            config, profile, self.tree, self.cwd, runtime.home,
            partial(runtime.dispatcher.request_permission, self))
        # a resumed session keeps its first meta
        self._phase = Phase.OPEN if origin.rollout_path is not None else Phase.NEW
        # what few sessions need (children, messages, notes...): made at first use
        super().__init__(Extras(inbox=list(origin.inbox) or None,
                                forked_from=origin.forked_from,
                                copied=len(origin.history) if origin.forked_from else 0,
                                resume_report=origin.resume_report,
                                typed=Typed(origin.output_schema) if origin.output_schema else None)
                         if origin.inbox or origin.forked_from or origin.resume_report
                         or origin.output_schema else None,
                         parent is None)

    def __repr__(self) -> str:
        kind = f"child of {self.parent.session_id} depth={self.depth}" if self.parent else "top"
        return f"<Session {self.session_id} {kind} model={self.model!r} {self._phase.value}>"

    # -- identity and state, as hosts, the manager and the task loop read them -------------
    @property
    def agent_name(self) -> str | None:
        """The profile a child runs (None for a top-level session)."""
        return self.profile.name if self.profile is not None and self.parent else None

    @property
    def is_child(self) -> bool:
        """Whether it is a child; False for the top-level sessions the engine gives out."""
        return self.parent is not None

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def started(self) -> bool:
        """Its task has run its first line."""
        return self._phase in (Phase.RUNNING, Phase.IDLE, Phase.ENDED, Phase.RELEASED)

    @property
    def budget(self) -> Budget | None:
        """Its limits as clamped at spawn (a root's: its tree's); None when it has none."""
        meter = self._meter
        return None if meter is None or meter.limits.unlimited else meter.limits

    @property
    def metered(self) -> bool:
        """A budget applies to it or an ancestor: its model calls are counted."""
        meter = self._meter
        return meter is not None and meter.active

    @property
    def meter(self) -> Meter:
        """What it spent against its budget and its ancestors' (an unmetered child's is made
        when asked for: most children never need one)."""
        meter = self._meter
        if meter is None:
            parent = self.parent
            assert parent is not None  # a top-level session's is made with it
            meter = self._meter = self.tree.child_meter(parent.meter, None,
                                                        self.stop_for_budget)
        return meter

    @meter.setter
    def meter(self, meter: Meter) -> None:
        self._meter = meter

    @property
    def ended(self) -> bool:
        return self._phase in (Phase.ENDED, Phase.RELEASED)

    @property
    def released(self) -> bool:
        """An ended child whose history and tools were dropped (its rollout has them)."""
        return self._phase is Phase.RELEASED

    @property
    def wrote_meta(self) -> bool:
        """Its rollout has its `session_meta` (the file can be read)."""
        return self._phase is not Phase.NEW

    @property
    def rollout_path(self) -> str:
        """Its rollout file. A new top-level session writes it only from its first task or
        child on: until then the file does not exist."""
        return self.recorder.path

    @property
    def config(self) -> SessionConfig:
        """Its configuration: a top-level session's as created (with its profile's and its
        MCP servers' part), a child's as derived from its parent's and its profile."""
        return self.kit.config

    @property
    def profile(self) -> Profile | None:
        return self.kit.profile

    @property
    def tool_context(self) -> ToolContext | None:
        return self.kit.tool_context

    # -- its counters, as hosts and listings read them ------------------------------------
    @property
    def started_at(self) -> float:
        return self.begun

    @property
    def answering_model(self) -> str:
        """The model that answered last: `model`, or the fallback that stood in for it."""
        return self.answered_by or self.model

    def allows(self, tool_name: str) -> bool:
        """Whether this session's profile allowlist admits a tool (no profile admits all)."""
        return self.kit.allows(tool_name)

    @property
    def offers_subsession_tools(self) -> bool:
        """Below the depth limit, and only those sub-session tools the allowlist admits."""
        return self.depth < self.tree.max_depth

    def tools(self) -> tuple[Tool, ...]:
        """The tools this session's model may call besides the engine's own."""
        return tuple(self.kit.tools.values())

    def tool_specs(self) -> tuple[dict[str, Any], ...]:
        """What the model is offered (fixed for the session's life)."""
        return self.kit.specs()

    def usage(self, include_children: bool = False) -> Usage:
        """Tokens, tool calls and model turns (model calls) this session has spent.

        Args:
            include_children: add what every descendant spent, those run by another
                process (Ray) included; a batch's ended children are not kept, so not
                counted (their usage is in the batch's output).

        Returns:
            The counts; `estimated` is set when a model reported no token counts and they
            were estimated.
        """
        tokens = self.token_usage
        own = Usage(input_tokens=tokens.input_tokens, output_tokens=tokens.output_tokens,
                    tool_calls=self.tool_calls, turns=self.turns, estimated=tokens.estimated)
        if not include_children:
            return own
        family = self.spawned
        tree = family.tree() if family is not None else []
        return Usage.total([own, *(s.usage() for s in tree), *self.remote_usages(),
                            *(u for s in tree for u in s.remote_usages())])

    def remote_usages(self) -> Iterable[Usage]:
        """What its descendants run by another process (Ray) reported, one per session."""
        extras = self._extras
        return () if extras is None or extras.elsewhere is None else extras.elsewhere.values()

    @property
    def sandbox_policy(self) -> dict[str, Any]:
        if self.tool_context is not None:
            return self.tool_context.sandbox_policy()
        return sandbox_policy(self.config.sandbox, self.config.network_access)

    @property
    def budget_stop(self) -> BudgetExhausted | None:
        """The budget stop its task ends with, if its stop is one."""
        stop = self.stop
        return stop if isinstance(stop, BudgetExhausted) else None

    # -- stops: a cancel or a budget, the first one wins ---------------------------------
    def request_stop(self, budget: BudgetExhausted | None = None, *,
                     deliver: bool = True) -> bool:
        """Stop its task (with `budget`: it ends `budget_limited`, else cancelled) unless a
        stop came first, or it is past stopping; False then. Without `deliver` the task is
        ending so by itself. A task that has not run its first line yet ends there, so its
        own `finally` still writes its ending."""
        if self.stop is not None or self.past_stopping:
            return False
        self.stop = CANCEL if budget is None else budget
        if deliver:
            self.cancel_task()
        return True

    @property
    def past_stopping(self) -> bool:
        """A top-level session can always be stopped (a child: once it has ended, not)."""
        return False

    def count_spent(self, spent: tuple[int, int]) -> None:
        """What its meter counted elsewhere (a shard: turns, tokens), kept when one counts."""
        if self.metered or any(spent):
            self.meter.turns, self.meter.tokens = spent

    def cancel_task(self) -> None:
        """Deliver a cancel to its running task (none yet: its first line sees its stop)."""
        running = self._task
        if running is not None and running is not asyncio.current_task():
            running.cancel()

    def claim_budget_stop(self, error: BudgetExhausted) -> None:
        """Its task is ending by itself on a budget: a cancel that comes later is no other
        ending (first wins)."""
        self.request_stop(error, deliver=False)

    def stop_for_budget(self, error: BudgetExhausted) -> None:
        """A limit of its meter was reached elsewhere (a descendant's tokens, the clock):
        its task is cancelled as `budget_limited`, and its descendants end the same way."""
        running = self._task
        if self.parent is not None:
            self.request_stop(error)
        elif running is None:  # an idle top-level session: its running children end
            family = self.spawned
            if family is not None:
                family.stop_all_children(error)
        elif not running.cancelling():  # a host's cancel came first
            self.request_stop(error)
