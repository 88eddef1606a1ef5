"""Rollout records as lines a person reads: messages, tool calls and outputs, events.

Colour only helps on a terminal; piped output and `NO_COLOR` stay plain, so
what a script or a test reads is the same text without escape codes.
"""

from __future__ import annotations

import os
from typing import Any, TextIO

import orjson

from subsessions.rollouts.values import local_time, parts_text, text

_RESET = "\x1b[0m"
BOLD, DIM, RED, GREEN, YELLOW, BLUE, MAGENTA, CYAN = "1", "2", "31", "32", "33", "34", "35", "36"
STATUS_COLOURS = {
    "completed": GREEN, "failed": RED, "cancelled": YELLOW,
    "running": CYAN, "interrupted": MAGENTA, "idle": DIM,
}
_ROLE_COLOURS = {"user": CYAN, "assistant": GREEN}
_INDENT = "    "


def wants_colour(out: TextIO, choice: str = "auto") -> bool:
    """`always`, `never`, or `auto`: a terminal, with NO_COLOR unset (no-color.org)."""
    if choice != "auto":
        return choice == "always"
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(out, "isatty", None)
    return bool(isatty and isatty())


class Style:
    """Wraps text in ANSI codes, or passes it through untouched."""

    __slots__ = ("enabled",)

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, text: str, *codes: str) -> str:
        if not self.enabled or not codes or not text:
            return text
        return f"\x1b[{';'.join(codes)}m{text}{_RESET}"

    def status(self, text: str, width: int = 0) -> str:
        return self(text.ljust(width), STATUS_COLOURS.get(text, ""))


def seconds_text(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.2f}s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{rest:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _block(first: str, text: str, indent: str = _INDENT) -> list[str]:
    """`first` then the text's lines, continuation lines indented under it."""
    lines = text.splitlines() or [""]
    return [first + lines[0], *(indent + line if line else "" for line in lines[1:])]


def render_record(record: dict[str, Any], style: Style) -> list[str]:
    """The lines one record shows as; session_meta, turn_context and echoes show as none."""
    payload: dict[str, Any] = record["payload"]
    kind = payload.get("type")
    if record["type"] == "response_item":
        return _item(payload, kind, style)
    if record["type"] != "event_msg":
        return []
    if kind in ("user_message", "agent_message", "token_count"):
        return []  # the same text is in a response_item; the total is in the header
    if kind == "task_started":
        return [style(f"-- task started {local_time(record.get('timestamp'))} --", DIM)]
    if kind == "task_complete":
        return [style("  * task complete", GREEN)]
    if kind == "turn_aborted":
        return [style(f"  * turn aborted: {text(payload.get('reason')) or '?'}", YELLOW)]
    if kind == "error":
        return [style(line, RED) for line in _block("  * error: ", text(payload.get("message")))]
    if kind == "background_event":
        return [style(f"  * {text(payload.get('message'))}", MAGENTA)]
    return [style(f"  * {text(kind)}", DIM)]


def _item(payload: dict[str, Any], kind: object, style: Style) -> list[str]:
    if kind == "message":
        role = text(payload.get("role")) or "?"
        tag = style(f"[{role}]", BOLD, _ROLE_COLOURS.get(role, DIM))
        return _block(f"{tag} ", parts_text(payload.get("content")))
    if kind == "function_call":
        call = f"  -> {text(payload.get('name'))}({text(payload.get('arguments'))})"
        return [style(call, YELLOW) + style(f"  [{text(payload.get('call_id'))}]", DIM)]
    if kind == "function_call_output":
        ok = payload.get("success", True) is not False
        mark = style("  <- ok: ", BLUE) if ok else style("  <- failed: ", RED)
        return _block(mark, _output_text(payload.get("output")), _INDENT + "  ")
    if kind == "reasoning":
        summary = parts_text(payload.get("summary"), " ")
        return [style(line, DIM) for line in _block("  (reasoning) ", summary or "...")]
    return [style(f"  ({text(kind)})", DIM)]


def _output_text(output: object) -> str:
    """A tool output; one that is JSON holding a single multi-line text shows that text."""
    shown = text(output)
    try:
        value = orjson.loads(shown)
    except orjson.JSONDecodeError:
        return shown
    if isinstance(value, dict) and len(value) == 1:
        ((key, inner),) = value.items()
        if isinstance(inner, str) and "\n" in inner:
            return f"{key}:\n{inner}"
    return shown
