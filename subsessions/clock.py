"""The timestamps of rollout lines and events (L0: imports nothing of the package)."""

from __future__ import annotations

import time


class _Clock:
    """UTC timestamps with millisecond precision, formatted once a millisecond."""

    __slots__ = ("_milli", "_stamp")

    def __init__(self) -> None:
        self._milli = -1
        self._stamp = ""

    def now(self) -> str:
        milli = int(time.time() * 1000)
        if milli != self._milli:
            second, rest = divmod(milli, 1000)
            prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._milli = milli
            self._stamp = f"{prefix}.{rest:03d}Z"
        return self._stamp


clock = _Clock()
