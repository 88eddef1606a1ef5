"""Field values of rollout records, read without trusting their types or ranges.

A rollout may come from a crash, another tool or Codex itself, so every value a
reader shows or compares passes through here first: text that turned out to be
a number shows as that number, a time the platform cannot represent shows as
written (and counts as no time), and nothing raises.
"""

from __future__ import annotations

from datetime import datetime

import orjson


def text(value: object) -> str:
    """Any JSON value as text: a string as it is, None as "", anything else as its JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # not a JSON value (only reachable from Python callers)
        return str(value)


def optional_text(value: object) -> str | None:
    """`text`, but None for an absent or empty value (a row shows "-" for it)."""
    return text(value) or None


def parts_text(value: object, separator: str = "") -> str:
    """A message's `content` or a reasoning `summary`: a string, or a list of parts whose
    `text` fields are joined; anything else shows as its JSON."""
    if isinstance(value, list):
        parts = (p.get("text") if isinstance(p, dict) else p for p in value)
        return separator.join(text(p) for p in parts if p is not None)
    return text(value)


def optional_stamp(value: object) -> str | None:
    """A timestamp field as written, or None when it is not text at all."""
    return value if isinstance(value, str) else None


def parse_stamp(stamp: object) -> float | None:
    """Epoch seconds of a timestamp (`2026-11-21T12:00:00.123Z`), None if it is not one
    or names a time this platform cannot represent."""
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except (ValueError, OverflowError, OSError):
        return None


def local_time(stamp: object) -> str:
    """A timestamp as local `YYYY-MM-DD hh:mm:ss`; one that has no local time (the edges of
    the calendar) as written; "-" when there is none."""
    seconds = parse_stamp(stamp)
    if seconds is None:
        return stamp if isinstance(stamp, str) and stamp else "-"
    try:
        return datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M:%S")
    except (ValueError, OverflowError, OSError):
        return stamp if isinstance(stamp, str) else "-"


def epoch_ms(moment: datetime) -> float:
    """Unix milliseconds of a datetime (naive = local), clamped to +-inf at the calendar's edges
    where the platform cannot convert it."""
    try:
        return moment.timestamp() * 1000
    except (ValueError, OverflowError, OSError):
        return float("-inf") if moment.year < 1970 else float("inf")
