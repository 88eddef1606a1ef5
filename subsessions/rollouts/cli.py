"""`subsessions rollouts ...`: list, show and tree views of rollout files."""

from __future__ import annotations

import argparse
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import orjson

from subsessions.items import message_text
from subsessions.rollouts.reader import (
    Rollout,
    RolloutNode,
    find_rollout,
    list_rollouts,
    read_rollout,
    rollout_tree,
)


def add_rollout_commands(
    commands: Any, common: argparse.ArgumentParser
) -> None:
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


def run_rollouts(args: argparse.Namespace, home: Path, out: TextIO) -> int:
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


def _duration(node: RolloutNode) -> str:
    records = node.rollout.records
    if len(records) < 2:
        return "-"
    start = records[0]["timestamp"]
    end = records[-1]["timestamp"]
    seconds = _seconds(end) - _seconds(start)
    return f"{seconds:.2f}s"


def _seconds(stamp: str) -> float:
    clock = stamp[11:-1]
    hours, minutes, seconds = clock.split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def print_tree(nodes: list[RolloutNode], out: TextIO, prefix: str = "", top: bool = True) -> None:
    for index, node in enumerate(nodes):
        last = index == len(nodes) - 1
        branch = "" if top else "└── " if last else "├── "
        rollout = node.rollout
        kind = rollout.meta.get("session_type") or rollout.source_kind
        out.write(f"{prefix}{branch}{rollout.session_id}  {kind:<13} {rollout.status:<10} "
                  f"{_duration(node)}\n")
        child_prefix = prefix if top else prefix + ("    " if last else "│   ")
        print_tree(list(node.children), out, child_prefix, top=False)


