"""`python tests/capped_wait.py CAP_MS ARGS...`: `python -m subsessions ARGS` with every wait
clamped to CAP_MS instead of an hour, so that tests see the clamp of the real `subsessions mcp`
and `serve` at work without waiting an hour (the constant made small, nothing else changed)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's package

from subsessions import children
from subsessions.cli import main

if __name__ == "__main__":
    children.MAX_TIMEOUT_MS = int(sys.argv[1])
    raise SystemExit(main(sys.argv[2:]))
