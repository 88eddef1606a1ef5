"""SessionParts: the parts of a session made only when needed (its event hub at the first
listener; its children, inbox, mailbox and notes in `Extras`), so a child nobody hears,
that never spawns nor is sent a message, carries two empty slots."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from attrs import define

from subsessions.events import EventHub, listening
from subsessions.tools import ToolContext
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
    def forked_from(self) -> str | None:
        extras = self._extras
        return None if extras is None else extras.forked_from

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
