"""The `subsessions` command line. User mistakes print one line on stderr and exit 1."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import orjson

from subsessions.demo import print_tree, run_demo
from subsessions.engine import default_home
from subsessions.errors import SubsessionError
from subsessions.items import message_text
from subsessions.profiles import load_profiles
from subsessions.rollouts.reader import (
    Rollout,
    find_rollout,
    list_rollouts,
    read_rollout,
    rollout_tree,
)


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

    rollouts = commands.add_parser("rollouts", help="inspect rollout files")
    rollout_commands = rollouts.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = rollout_commands.add_parser("list", parents=[common], help="newest first")
    listing.add_argument("--parent", help="only children of this session id")
    listing.add_argument("--source", help="cli, exec, mcp or subsession")
    listing.add_argument("--status", help="completed, failed, cancelled, running or idle")
    listing.add_argument("--since", type=datetime.fromisoformat, help="ISO date or time")
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--json", action="store_true", help="one JSON object a line")
    show = rollout_commands.add_parser("show", parents=[common], help="a readable transcript")
    show.add_argument("id", help="a session id or a unique prefix of one")
    tree = rollout_commands.add_parser("tree", parents=[common], help="parents and children")
    tree.add_argument("id", nargs="?", help="the root session (default: every top-level one)")
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
    return _rollouts(args, home, out)


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


def _summary(rollout: Rollout) -> dict[str, Any]:
    return {
        "id": rollout.session_id,
        "started": rollout.meta.get("timestamp"),
        "source": rollout.source_kind,
        "profile": rollout.meta.get("session_type"),
        "model": rollout.meta.get("model"),
        "status": rollout.status,
        "parent": rollout.parent_id,
        "tokens": rollout.total_tokens,
        "path": rollout.path,
        "skipped_lines": len(rollout.skipped),
    }


def _rollouts(args: argparse.Namespace, home: Path, out: TextIO) -> int:
    if args.action == "list":
        found = list_rollouts(home, parent=args.parent, source=args.source, status=args.status,
                              since=args.since, limit=args.limit)
        if args.json:
            for rollout in found:
                out.write(orjson.dumps(_summary(rollout)).decode() + "\n")
            return 0
        out.write(f"{'id':<36}  {'started':<20} {'source':<10} {'profile':<13} "
                  f"{'status':<10} {'tokens':>7}\n")
        for rollout in found:
            row = _summary(rollout)
            out.write(f"{row['id']:<36}  {row['started']!s:<20} {row['source']:<10} "
                      f"{row['profile'] or '-':<13} {row['status']:<10} {row['tokens']:>7}\n")
        return 0
    if args.action == "show":
        _show(read_rollout(find_rollout(home, args.id)), out)
        return 0
    if args.id is not None:
        find_rollout(home, args.id)  # a clear error for an unknown or ambiguous id
    print_tree(rollout_tree(home, args.id), out)
    return 0


def _show(rollout: Rollout, out: TextIO) -> None:
    meta = rollout.meta
    out.write(f"session {rollout.session_id}  ({meta.get('session_type') or rollout.source_kind},"
              f" model {meta.get('model')}, {rollout.status})\n")
    if rollout.parent_id:
        out.write(f"parent  {rollout.parent_id}\n")
    if meta.get("instructions"):
        first = str(meta["instructions"]).strip().splitlines()[0]
        out.write(f"instructions: {first} ...\n")
    for record in rollout.records:
        payload = record["payload"]
        kind = payload.get("type")
        if record["type"] == "response_item":
            if kind == "message":
                out.write(f"\n[{payload.get('role')}] {message_text(payload)}\n")
            elif kind == "function_call":
                out.write(f"  -> {payload.get('name')}({payload.get('arguments')})"
                          f"  [{payload.get('call_id')}]\n")
            elif kind == "function_call_output":
                mark = "ok" if payload.get("success") else "failed"
                out.write(f"  <- {mark}: {payload.get('output')}\n")
        elif record["type"] == "event_msg" and kind in (
            "background_event", "task_complete", "turn_aborted", "error"
        ):
            detail = payload.get("message") or payload.get("reason") or ""
            out.write(f"  * {kind} {detail}\n".rstrip() + "\n")
    for skipped in rollout.skipped:
        out.write(f"  ! skipped line {skipped.line}: {skipped.reason}\n")
