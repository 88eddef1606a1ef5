"""ChildBook: what a parent knows of its children, the read side of its manager: each
child by id (oldest first), and those that ended unseen."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from subsessions.children import ChildInfo, ChildStatus
from subsessions.errors import SessionBusy, UnknownSession

if TYPE_CHECKING:  # names only: sessions and children are made above
    from subsessions._core.conversation import Child, Conversation


class ChildBook:
    """The base of `SubsessionManager`: its children's records and what they answer."""

    __slots__ = ("_children", "_owner", "_unnoticed")

    def __init__(self, owner: Conversation) -> None:
        self._owner = owner
        self._children: dict[str, Child] = {}
        self._unnoticed: list[Child] = []  # ended children the parent was not told of yet

    def __repr__(self) -> str:
        counts = Counter(child.status.value for child in self._children.values())
        return f"<SubsessionManager of {self._owner.session_id} {dict(counts)}>"

    def _lookup(self, session_id: str) -> Child:
        record = self._children.get(session_id) if isinstance(session_id, str) else None
        if record is None:
            raise UnknownSession(str(session_id))
        return record

    def status(self, session_id: str) -> ChildStatus:
        return self._lookup(session_id).status

    def info(self, session_id: str) -> ChildInfo:
        return self._lookup(session_id).info()

    def children(self) -> list[ChildInfo]:
        """Every child of this session, oldest first."""
        return [child.info() for child in self._children.values()]

    def forget(self, session_id: str) -> None:
        """Drop an ended child that nobody will ask about again (a batch's, once its ending
        is journaled): a million of them are not kept. Its rollout stays on disk."""
        record = self._lookup(session_id)
        if not record.settled:
            raise SessionBusy(session_id, "is running; only an ended child can be forgotten")
        del self._children[session_id]
        self._owner.runtime.dispatcher.forget_child(session_id)

    def running(self) -> list[str]:
        return [cid for cid, child in self._children.items() if not child.settled]

    @property
    def has_children(self) -> bool:
        return bool(self._children)

    @property
    def has_notices(self) -> bool:
        return bool(self._unnoticed)

    def take_notices(self) -> list[ChildInfo]:
        """Children that ended unseen since the last call; each is returned once."""
        notices = [r.info() for r in self._unnoticed if not r.waited]
        for record in self._unnoticed:
            record.waited = True
        self._unnoticed.clear()
        return notices

    def mark_seen(self, session_id: str) -> None:
        """The model learned how this child ended (e.g. from cancel_session): no notice."""
        self._lookup(session_id).waited = True
