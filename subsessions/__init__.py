"""subsessions: spawn, drive, wait for and cancel LLM sub-sessions from profile presets.

The public names (`__all__`) live in `subsessions._exports` and are imported on first use, so
a command that needs none of them yet pays nothing for them: `subsessions mcp` answers its
host's handshake before the engine, the model client or Ray are imported.
"""

from __future__ import annotations

import importlib

from subsessions._version import __version__ as __version__

TYPE_CHECKING = False  # not `typing`'s: the console entry imports nothing before its Ctrl-C guard
if TYPE_CHECKING:
    from typing import Any

    from subsessions._exports import *  # noqa: F403
    from subsessions._exports import __all__ as __all__


def __getattr__(name: str) -> Any:
    # Not for a submodule not imported yet (`from subsessions import task` imports it then,
    # even from a module `_exports` imports: no cycle), nor for private names.
    from importlib.util import find_spec

    if (name.startswith("_") and name != "__all__") or find_spec(f"{__name__}.{name}"):
        raise AttributeError(f"module 'subsessions' has no attribute {name!r}")
    exports = importlib.import_module("subsessions._exports")
    if name != "__all__" and name not in exports.__all__:
        raise AttributeError(f"module 'subsessions' has no attribute {name!r}")
    value = getattr(exports, name)
    globals()[name] = value  # once: later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *importlib.import_module("subsessions._exports").__all__})
