"""`subsessions worktrees list|clean`: the git worktrees that worktree children left in the
home, and removing those whose child has ended.

A child's status comes from its rollout, as `subsessions rollouts` reads it: a worktree
whose child still runs (or whose rollout cannot be found) is never removed; `clean` keeps
the branch of a worktree that holds commits, so the work stays reachable.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import TextIO

from subsessions.errors import RolloutError, SubsessionError
from subsessions.rollouts.files import find_rollout
from subsessions.rollouts.summary import summarise
from subsessions.tools import worktrees

ENDED = ("completed", "failed", "cancelled", "interrupted")


def run_worktrees(args: argparse.Namespace, home: Path, out: TextIO) -> int:
    if not home.is_dir():
        raise RolloutError(str(home), "no such directory, so no worktrees "
                           "(--home DIR or $SUBSESSIONS_HOME names the home)")
    found = asyncio.run(worktrees.found(home))
    rows = [worktrees.describe(tree, _status(home, Path(tree.path).name)) for tree in found]
    if args.action == "list":
        if args.json:
            out.write(json.dumps(rows, indent=2) + "\n")
        for row in [] if args.json else rows:
            out.write(f"{row['session_id']}  {row['status']:<11} {row['branch']:<50} "
                      f"{row['path']}\n")
        return 0
    removed = asyncio.run(_clean([t for t, r in zip(found, rows, strict=True)
                                  if r["status"] in ENDED]))
    for path in removed:
        out.write(f"removed {path}\n")
    kept = len(found) - len(removed)
    out.write(f"{len(removed)} removed, {kept} kept (their children have not ended)\n"
              if kept else f"{len(removed)} removed\n")
    return 0


def _status(home: Path, session_id: str) -> str:
    try:
        return summarise(str(find_rollout(home, session_id))).status
    except (SubsessionError, OSError):
        return "unknown"


async def _clean(ended: list[worktrees.Worktree]) -> list[str]:
    for tree in ended:
        await worktrees.remove(tree)
    return [tree.path for tree in ended]
