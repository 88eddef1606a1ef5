"""The top-level sessions open in any engine of this process, so none is resumed twice."""

from __future__ import annotations

OPEN_IN_THIS_PROCESS: set[str] = set()
