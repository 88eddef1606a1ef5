"""The `subsessions` command line. User mistakes print one line on stderr and exit 1."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from subsessions.demo import run_demo
from subsessions.engine import default_home
from subsessions.errors import SubsessionError
from subsessions.profiles import load_profiles
from subsessions.rollouts.cli import add_rollout_commands, run_rollouts


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--home", type=Path, default=None,
        help="state directory (default: $SUBSESSIONS_HOME, else ~/.subsessions)",
    )
    parser = argparse.ArgumentParser(
        prog="subsessions",
        description="Spawn, drive, wait for, cancel and inspect LLM sub-sessions.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser(
        "demo", parents=[common],
        help="offline demo: a scripted parent fans out, waits, cancels, prints the tree",
        description="Runs the main job offline on a scripted model, in a temporary home "
        "unless --home is given.",
    )

    profiles = commands.add_parser("profiles", help="the loaded profiles")
    profile_commands = profiles.add_subparsers(dest="action", required=True, metavar="ACTION")
    profile_commands.add_parser("list", parents=[common], help="names, sources, descriptions")
    show_profile = profile_commands.add_parser("show", parents=[common], help="one profile")
    show_profile.add_argument("name")

    add_rollout_commands(commands, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args, sys.stdout)
    except SubsessionError as exc:
        print(f"subsessions: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _run(args: argparse.Namespace, out: TextIO) -> int:
    if args.command == "demo":
        if args.home is not None:
            return asyncio.run(run_demo(args.home, out))
        with tempfile.TemporaryDirectory(prefix="subsessions-demo-") as scratch:
            code = asyncio.run(run_demo(Path(scratch), out))
        out.write("(a temporary home, removed now; pass --home DIR to keep the rollouts)\n")
        return code
    home: Path = args.home or default_home()
    if args.command == "profiles":
        return _profiles(args, home, out)
    return run_rollouts(args, home, out)


def _profiles(args: argparse.Namespace, home: Path, out: TextIO) -> int:
    loaded = load_profiles(home, os.getcwd())
    if args.action == "list":
        for name, entry in loaded.items():
            out.write(f"{name:<16} {entry.source:<10} {entry.profile.description}\n")
        return 0
    if args.name not in loaded:
        raise SubsessionError(f"no profile named {args.name!r}; have: {', '.join(loaded)}")
    entry = loaded[args.name]
    profile = entry.profile
    out.write(f"name: {profile.name}\nsource: {entry.source}\ndescription: {profile.description}\n")
    out.write(f"model: {profile.model}\nfallback_models: {list(profile.fallback_models)}\n")
    tools = "all of the parent's" if profile.tools is None else list(profile.tools)
    out.write(f"tools: {tools}\nmax_turns: {profile.max_turns}\n")
    out.write(f"developer_instructions:\n{profile.developer_instructions}")
    for label in ("persona", "memory"):
        text = getattr(profile, label)
        if text:
            out.write(f"{label} (top-level only):\n{text}\n")
    return 0


