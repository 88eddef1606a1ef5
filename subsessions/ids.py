"""Session ids: uuid7, so rollout files sort by creation time."""

from __future__ import annotations

import os
import re
import struct
import threading
import time

_CANONICAL = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_PATHLIKE = re.compile(r"[/\\\x00-\x1f\x7f-\x9f]|\.\.")
MAX_ID_LENGTH = 128


class _Uuid7:
    """RFC 9562 uuid7 with a 12-bit counter in `rand_a` (its method 1): ids made in the
    same millisecond still sort in creation order, and the timestamp stays the clock's
    (a burst of ids must not push it into the future, as a +1 ms per id scheme does).
    The 62 random bits come from a pooled `os.urandom` read, not one read per id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._millis = 0
        self._counter = 0
        self._pool = b""
        self._at = 0

    def forget_pool(self) -> None:
        """A forked child must not hand out its parent's next random bits: two processes
        would then make the same id in the same millisecond."""
        self._lock = threading.Lock()
        self._pool, self._at = b"", 0

    def __call__(self) -> str:
        with self._lock:
            millis = time.time_ns() // 1_000_000
            if millis > self._millis:
                self._millis, self._counter = millis, 0
            elif self._counter < 0xFFF:
                self._counter += 1
            else:  # 4,096 ids in one millisecond: borrow the next one
                self._millis, self._counter = self._millis + 1, 0
            if self._at == len(self._pool):
                self._pool, self._at = os.urandom(8 * 512), 0
            tail = _WORD.unpack_from(self._pool, self._at)[0] >> 2  # 62 random bits
            self._at += 8
            millis, counter = self._millis, self._counter
        # unix_ts_ms (48) | ver 7 (4) + counter (12) | var 0b10 (2) + 62 random bits
        return _FORMAT % (millis >> 16, millis & 0xFFFF, 0x7000 | counter,
                          0x8000 | tail >> 48, tail & 0xFFFF_FFFF_FFFF)


_WORD = struct.Struct(">Q")
_FORMAT = "%08x-%04x-%04x-%04x-%012x"
new_session_id = _Uuid7()
os.register_at_fork(after_in_child=new_session_id.forget_pool)


def is_session_id(value: str) -> bool:
    """True only for the canonical lowercase form we hand out."""
    return len(value) == 36 and _CANONICAL.fullmatch(value) is not None


def id_problem(value: str) -> str | None:
    """Why a string can never be an id (hostile input), or None if it merely may not exist."""
    if len(value) > MAX_ID_LENGTH:
        return f"session_id is longer than {MAX_ID_LENGTH} characters"
    if _PATHLIKE.search(value):
        return "session_id must be a session id, not a path"
    return None
