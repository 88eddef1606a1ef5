"""Run a module as `python -m` does, with the first import of some packages held until the
test lets it go: what a process answers before it needs them is then seen whatever the
machine's speed, never guessed from a timing.

    python tests/held_imports.py FIFO openai,ray -m subsessions mcp ...

The import of a named top-level package (or of any of its submodules) waits, in whichever
thread reaches it, until the test opens FIFO for writing and closes it; one line
`held: NAME` goes to stderr when it starts waiting.
"""

from __future__ import annotations

import importlib.abc
import os
import runpy
import sys
import threading
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType


class Hold(importlib.abc.MetaPathFinder):
    """Finds nothing itself: it only makes the first import of `names` wait for the FIFO."""

    def __init__(self, fifo: str, names: set[str]) -> None:
        self._fifo = fifo
        self._names = names
        self._lock = threading.Lock()
        self._released = False

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname.partition(".")[0] in self._names:
            with self._lock:
                if not self._released:
                    print(f"held: {fullname}", file=sys.stderr, flush=True)
                    with open(self._fifo, "rb") as fifo:  # until a writer opens and closes it
                        fifo.read()
                    self._released = True
        return None


def main(argv: list[str]) -> None:
    fifo, names, flag, module, *rest = argv
    assert flag == "-m", argv
    sys.meta_path.insert(0, Hold(fifo, set(names.split(","))))
    sys.argv = [module, *rest]
    sys.path[0] = os.getcwd()  # as `python -m` has it, not this file's folder
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
