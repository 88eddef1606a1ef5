"""`subsessions watch [SESSION_ID] [--once]`: the live tree, or the tree once as text.

Textual is imported only here, and only when the live view opens: `--once` and every
other command work without the `[watch]` extra.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import TextIO

from subsessions.engine.control.paths import clear_stale
from subsessions.errors import InvalidArguments, RolloutError, SubsessionError
from subsessions.watch.cells import plain_table
from subsessions.watch.follower import PER_POLL, Follower
from subsessions.watch.forest import build_rows

NEEDS_TEXTUAL = ("the live view needs Textual: pip install 'subsessions[watch]' "
                 "(or print the tree once with --once)")


def run_watch(args: argparse.Namespace, home: Path, out: TextIO) -> int:
    if args.limit < 0 or not args.interval > 0:
        raise InvalidArguments("watch", "--limit must be 0 (all) or more, --interval positive")
    if not home.is_dir():
        raise RolloutError(str(home), "no such directory, so no rollouts "
                           "(--home DIR or $SUBSESSIONS_HOME names the home)")
    clear_stale(home)  # sockets of engines that died (SIGKILL): nobody answers there
    follower = Follower(str(home), root=args.id, limit=args.limit or None,
                        per_poll=None if args.once else PER_POLL)  # --once: every file whole
    follower.open()
    if args.once:
        return _once(follower, home, out)
    try:
        from subsessions.watch.app import WatchApp
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in ("textual", "rich"):
            raise
        raise SubsessionError(NEEDS_TEXTUAL) from None
    if not (sys.stdin.isatty() and out.isatty()):
        raise SubsessionError("the live view needs a terminal; use --once in a pipe")
    WatchApp(follower, interval=args.interval).run()
    return 0


def _once(follower: Follower, home: Path, out: TextIO) -> int:
    rows = build_rows(follower.sessions, follower.alive)
    width = shutil.get_terminal_size().columns if out.isatty() else None
    for line in plain_table(rows, time.time(), width):
        out.write(line + "\n")
    if follower.hidden and follower.root is None:
        sys.stderr.write(f"({follower.hidden} older session(s) not shown: --limit 0 shows "
                         "every one)\n")
    if not rows:
        sys.stderr.write(f"subsessions: no sessions in {home}\n")
        return 1
    return 0
