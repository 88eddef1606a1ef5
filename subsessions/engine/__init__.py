"""The engine's face: `Engine` (`facade`), its close (`close`), the one access rule for
sessions named by a caller (`access`) and the control socket's two sides (`control`).

Importing this package imports none of them: the command line reads `control`'s help text
before `subsessions mcp` has answered its host, long before an engine is built."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from subsessions.engine.facade import OPEN_IN_THIS_PROCESS, Engine

__all__ = ["OPEN_IN_THIS_PROCESS", "Engine"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("subsessions.engine.facade"), name)
    raise AttributeError(f"module 'subsessions.engine' has no attribute {name!r}")
