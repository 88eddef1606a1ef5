"""`subsessions rollouts ...`: list, show, tree and tail views of rollout files."""

from __future__ import annotations

import argparse
import re
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

import orjson

from subsessions.errors import InvalidArguments, RolloutError
from subsessions.ids import is_session_id
from subsessions.rollouts.files import find_rollout, rollout_entries, unique_prefixes
from subsessions.rollouts.follow import Tail
from subsessions.rollouts.listing import RolloutNode, list_rollouts, rollout_tree
from subsessions.rollouts.reader import Rollout, read_rollout
from subsessions.rollouts.render import (
    BOLD,
    DIM,
    MAGENTA,
    Style,
    render_record,
    seconds_text,
    wants_colour,
)
from subsessions.rollouts.summary import (
    RolloutSummary,
    as_record,
    instructions_of,
    spawn_of,
    summarise,
)
from subsessions.rollouts.values import local_time

_AGE = re.compile(r"(\d+)([smhd])")
_SHOWN = 200  # characters of the instructions' first line that `show` prints
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def run_rollouts(args: argparse.Namespace, home: Path, out: TextIO) -> int:
    """The exit code: 0, or 1 when there was nothing to show (as grep does for no match)."""
    if not home.is_dir():
        raise RolloutError(str(home), "no such directory, so no rollouts "
                           "(--home DIR or $SUBSESSIONS_HOME names the home)")
    style = Style(wants_colour(out, args.color))
    if args.action == "list":
        return _list(args, home, out, style)
    if args.action == "show":
        _show(read_rollout(find_rollout(home, args.id)), out, style)
        return 0
    if args.action == "tail":
        return _tail(args, home, out, style)
    nodes = rollout_tree(home, args.id)
    if not nodes:
        sys.stderr.write(f"subsessions: no sessions in {home}\n")
        return 1
    print_tree(nodes, out, style)
    return 0


# -- list ----------------------------------------------------------------------------------

def _list(args: argparse.Namespace, home: Path, out: TextIO, style: Style) -> int:
    if args.limit < 0:
        raise InvalidArguments("--limit", "must be 0 (all) or more")
    parent = args.parent
    if parent is not None and not is_session_id(parent):
        parent = find_rollout(home, parent).name[-42:-6]  # a prefix: whose?
    page = list_rollouts(
        home, parent=parent, source=args.source, status=args.status,
        since=_since(args.since), limit=args.limit or None, cursor=args.cursor,
    )
    every = [key for key, _ in rollout_entries(home)]
    if args.json:
        for row in page:
            out.write(orjson.dumps(summary_row(row)).decode() + "\n")
    elif page:
        _table(list(page), every, out, style)
    if page.unreadable:
        sys.stderr.write(f"({len(page.unreadable)} file(s) left out, not rollouts: "
                         f"{page.unreadable[0]}{' ...' if len(page.unreadable) > 1 else ''})\n")
    if page.next_cursor is not None:
        sys.stderr.write(f"(more: --cursor {page.next_cursor})\n")
    if not page:
        sys.stderr.write(f"subsessions: {_nothing(args, home, bool(every))}\n")
        return 1
    return 0


_SOURCES = ("cli", "exec", "mcp", "subsession")


def _nothing(args: argparse.Namespace, home: Path, any_files: bool) -> str:
    """Why a listing is empty, naming the filters that left nothing."""
    if not any_files:
        return f"no sessions in {home}"
    given = [f"--{name} {value}" for name in ("parent", "source", "status", "since", "cursor")
             if (value := getattr(args, name)) is not None]
    if not given:
        return f"no readable sessions in {home}"
    hint = ""
    if args.source is not None and args.source not in _SOURCES:
        hint = f" (sources are {', '.join(_SOURCES)})"
    return f"no sessions match {' '.join(given)}{hint}"


def _since(when: str | None) -> datetime | None:
    if when is None:
        return None
    age = _AGE.fullmatch(when.strip())
    if age is not None:
        try:
            return datetime.now() - timedelta(**{_UNITS[age[2]]: int(age[1])})
        except OverflowError:  # older than the calendar: every session is newer
            return None
    try:
        return datetime.fromisoformat(when)
    except ValueError:
        raise InvalidArguments(
            "--since", f"expected an ISO date or time (2026-11-21, 2026-11-21T13:00) "
            f"or an age (30m, 2h, 7d), not {when!r}"
        ) from None


def summary_row(summary: RolloutSummary) -> dict[str, Any]:
    """A list row for machines: the same fields as the table, in full."""
    seconds = summary.duration
    return {
        "id": summary.session_id,
        "started": summary.started,
        "source": summary.source_kind,
        "profile": summary.profile,
        "model": summary.model,
        "status": summary.status,
        "parent": summary.parent_id,
        "duration": round(seconds, 3) if seconds is not None else None,
        "tokens": summary.tokens,
        "path": summary.path,
        "cursor": summary.key,
    }


def _table(rows: list[RolloutSummary], every: list[str], out: TextIO, style: Style) -> None:
    prefixes = unique_prefixes([r.key for r in rows], every)
    width = max((len(p) for p in prefixes.values()), default=8)
    cells = [
        (prefixes[r.key], local_time(r.started), r.source_kind, r.profile or "-",
         r.model or "-", r.status, seconds_text(r.duration),
         "-" if r.tokens is None else str(r.tokens))
        for r in rows
    ]
    widths = [max([len(h), *(len(c[i]) for c in cells)]) for i, h in enumerate(_HEADER)]
    widths[0] = max(widths[0], width)
    out.write(style(_line(_HEADER, widths), BOLD) + "\n")
    for row in cells:
        text = _line(row, widths)
        if style.enabled:  # colour the status cell only, after padding
            start = sum(w + 2 for w in widths[:5])
            text = text[:start] + style.status(row[5], widths[5]) + text[start + widths[5]:]
        out.write(text + "\n")


_HEADER = ("id", "started", "source", "profile", "model", "status", "duration", "tokens")


def _line(cells: tuple[str, ...], widths: list[int]) -> str:
    parts = [c.ljust(w) for c, w in zip(cells[:-2], widths, strict=False)]
    parts += [cells[-2].rjust(widths[-2]), cells[-1].rjust(widths[-1])]
    return "  ".join(parts)


# -- show ----------------------------------------------------------------------------------

def _show(rollout: Rollout, out: TextIO, style: Style) -> None:
    meta = rollout.meta
    kind = rollout.profile or rollout.source_kind
    out.write(style(f"session {rollout.session_id}", BOLD) + f"  ({kind})\n")
    tokens = rollout.total_tokens
    out.write(f"  status   {style.status(rollout.status)}  "
              f"({seconds_text(rollout.duration)}, {tokens} tokens)\n")
    out.write(f"  started  {local_time(meta.get('timestamp'))}  source {rollout.source_kind}\n")
    spawn = spawn_of(meta)
    if rollout.parent_id and spawn is not None:
        depth = spawn["depth"] if spawn["depth"] is not None else "?"
        out.write(f"  parent   {rollout.parent_id}  (depth {depth})\n")
    out.write(f"  model    {meta.get('model')} ({meta.get('model_provider')})\n")
    out.write(f"  cwd      {meta.get('cwd')}\n  file     {rollout.path}\n")
    instructions = instructions_of(meta).strip()
    if instructions:
        first, _, rest = instructions.partition("\n")
        more = " ..." if rest or len(first) > _SHOWN else ""
        out.write(style(f"  instructions: {first[:_SHOWN]}{more}", DIM) + "\n")
    for record in rollout.records:
        for line in render_record(record, style):
            out.write(line + "\n")
    if rollout.status == "running":
        out.write(style("  * still running (no ending yet)", DIM) + "\n")
    elif rollout.status == "interrupted" and not rollout.events("turn_aborted")[-1:]:
        out.write(style(f"  * interrupted: its process (pid {meta.get('pid', '?')}) is gone "
                        "and the task has no ending", MAGENTA) + "\n")
    for skipped in rollout.skipped:
        out.write(style(f"  ! skipped line {skipped.line}: {skipped.reason}", MAGENTA) + "\n")


# -- tree ----------------------------------------------------------------------------------

def print_tree(nodes: list[RolloutNode], out: TextIO, style: Style | None = None) -> None:
    """Roots flush left, descendants under them with box-drawing branches."""
    _branches(nodes, out, style or Style(False), "", top=True)


def _branches(nodes: list[RolloutNode], out: TextIO, style: Style, prefix: str, top: bool) -> None:
    for index, node in enumerate(nodes):
        last = index == len(nodes) - 1
        branch = "" if top else "└── " if last else "├── "
        summary = node.rollout
        kind = summary.profile or summary.source_kind
        out.write(f"{prefix}{branch}{summary.session_id}  {kind:<13} "
                  f"{style.status(summary.status, 11)} {seconds_text(summary.duration)}"
                  f"{_cycle_note(node, style)}\n")
        child_prefix = prefix if top else prefix + ("    " if last else "│   ")
        _branches(list(node.children), out, style, child_prefix, top=False)


def _cycle_note(node: RolloutNode, style: Style) -> str:
    if not node.cycle:
        return ""
    parent = node.rollout.parent_id
    if parent == node.rollout.session_id:
        return style("  (parent cycle: names itself as its parent)", MAGENTA)
    return style(f"  (parent cycle: its parent {parent} is below it)", MAGENTA)


# -- tail ----------------------------------------------------------------------------------

def _tail(args: argparse.Namespace, home: Path, out: TextIO, style: Style) -> int:
    if args.lines < 0 or args.interval <= 0:
        raise InvalidArguments("tail", "--lines must be 0 or more and --interval positive")
    summary = summarise(str(find_rollout(home, args.id)))
    tail = Tail(summary, interval=args.interval)
    if not args.raw:
        kind = summary.profile or summary.source_kind
        out.write(style(f"session {summary.session_id}", BOLD)
                  + f"  ({kind}, {style.status(summary.status)})\n")

    def shown(line: bytes) -> list[str]:
        if args.raw:
            return [line.decode("utf-8", "replace")]
        record = as_record(line)
        if record is None:
            return [style("  ! an unreadable line", MAGENTA)]
        return render_record(record, style)

    def emit(line: bytes) -> None:
        for shown_line in shown(line):
            out.write(shown_line + "\n")

    for line in tail.last(args.lines, lambda line: bool(shown(line))):
        emit(line)
    out.flush()
    if args.follow:
        for line in tail.follow():
            emit(line)
            out.flush()
        if tail.writer_gone:
            note = (f"* its process (pid {tail.writer.get('pid', '?')}) is gone: "
                    f"the session is {tail.status}")
            if args.raw:
                sys.stderr.write(note + "\n")
            else:
                out.write(style("  " + note, MAGENTA) + "\n")
    return 0
