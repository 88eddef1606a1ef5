"""The timestamps of rollout lines and events, and the seconds budgets count (L0: imports
nothing of the package)."""

from __future__ import annotations

import time
from collections.abc import Callable


class _Clock:
    """UTC timestamps with millisecond precision, formatted once a millisecond; and
    `monotonic`, the seconds that limits on seconds (`meter`) count in, which a test may
    replace to put a session exactly at its limit."""

    __slots__ = ("_milli", "_stamp", "monotonic")

    def __init__(self) -> None:
        self._milli = -1
        self._stamp = ""
        self.monotonic: Callable[[], float] = time.monotonic

    def now(self) -> str:
        milli = int(time.time() * 1000)
        if milli != self._milli:
            second, rest = divmod(milli, 1000)
            prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._milli = milli
            self._stamp = f"{prefix}.{rest:03d}Z"
        return self._stamp


clock = _Clock()
