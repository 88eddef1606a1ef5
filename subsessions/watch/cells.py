"""A row as the text of its cells, and the whole tree as plain lines (`watch --once`).

The live view and `--once` show the same cells, so a test of the text is a test of
what the screen shows, less its colours.
"""

from __future__ import annotations

from collections.abc import Sequence

from attrs import frozen

from subsessions.rollouts.files import unique_prefixes
from subsessions.rollouts.render import seconds_text
from subsessions.watch.forest import Row, Totals
from subsessions.watch.stats import DAMAGED


@frozen
class Column:
    title: str
    right: bool = False  # numbers are right-aligned


COLUMNS = (
    Column("SESSION"), Column("PROFILE"), Column("MODEL"), Column("STATUS"),
    Column("TURNS", True), Column("IN", True), Column("OUT", True), Column("TOOLS", True),
    Column("ELAPSED", True), Column("SUBTREE n·in/out·tools"), Column("LAST MESSAGE"),
)
STATUS = 3
MESSAGE = len(COLUMNS) - 1
_INDENT = "  "
_MESSAGE_ONCE = 72  # characters of the last message `--once` prints on a pipe

Cells = tuple[str, ...]


def short_ids(keys: Sequence[str]) -> dict[str, str]:
    """The shortest unique prefix of each key among them (at least 8 characters)."""
    every = sorted(keys)
    return unique_prefixes(every, every)


def row_cells(row: Row, short: str, now: float) -> Cells:
    """The text of each cell; `now` (epoch seconds) times a session still running."""
    stats = row.stats
    running = row.status == "running"
    note = stats.note(running)
    message = " ".join(printable(stats.last_message).split())
    if note is not None:
        message = f"! {note}" + (f": {message}" if message else "")
    if row.status == DAMAGED:
        return (_INDENT * row.depth + short, "-", "-", DAMAGED, "", "", "", "", "", "", message)
    return (
        _INDENT * row.depth + short,
        printable(stats.profile or stats.source_kind),
        printable(stats.model or "-"),
        row.status,
        str(stats.turns),
        amount(stats.input_tokens),
        amount(stats.output_tokens),
        str(stats.tool_calls),
        _elapsed(stats.started, now if running else stats.last_stamp, running),
        _subtree(row.totals),
        message,
    )


def printable(text: str) -> str:
    """Text from a file on one line, its control characters (a terminal's escapes) made "?"."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else " " if c.isspace() else "?" for c in text)


def amount(count: int) -> str:
    """A token count in four characters or so: 987, 12.3k, 4.5M."""
    if count < 1000:
        return str(count)
    if count < 999_950:
        return f"{count / 1000:.1f}k"
    return f"{count / 1_000_000:.1f}M"


def _elapsed(start: float | None, end: float | None, running: bool) -> str:
    if start is None or end is None:
        return "-"
    seconds = max(0.0, end - start)
    if running and seconds < 60:
        return f"{int(seconds)}s"  # a live clock ticks in whole seconds
    return seconds_text(seconds)


def _subtree(totals: Totals | None) -> str:
    if totals is None:
        return ""
    text = (f"{totals.sessions} · {amount(totals.input_tokens)}/{amount(totals.output_tokens)}"
            f" · {totals.tool_calls}")
    return text + (f" ({totals.running} running)" if totals.running else "")


def widths_of(lines: Sequence[Cells]) -> list[int]:
    """Each column as wide as its widest cell or its title."""
    return [max([len(column.title), *(len(cells[at]) for cells in lines)])
            for at, column in enumerate(COLUMNS)]


def padded(cells: Sequence[str], widths: Sequence[int]) -> list[str]:
    """Cells (from the first column on) padded to their widths, numbers to the right."""
    return [cell.rjust(width) if column.right else cell.ljust(width)
            for cell, width, column in zip(cells, widths, COLUMNS, strict=False)]


def join(cells: Cells, widths: Sequence[int]) -> str:
    """One line: cells padded to their widths, two spaces apart, the last one left as is."""
    return "  ".join([*padded(cells[:-1], widths), cells[-1]]).rstrip()


def plain_table(rows: Sequence[Row], now: float, width: int | None = None) -> list[str]:
    """The tree as lines of text; the last message is cut to fit `width` (else to a few words)."""
    shorts = short_ids([row.stats.key for row in rows])
    lines = [row_cells(row, shorts[row.stats.key], now) for row in rows]
    widths = widths_of(lines)
    room = _MESSAGE_ONCE if width is None else max(8, width - sum(widths[:-1]) - 2 * MESSAGE)
    header = tuple(column.title for column in COLUMNS)
    return [join(header, widths), *(join((*cells[:-1], cut(cells[-1], room)), widths)
                                    for cells in lines)]


def cut(text: str, room: int) -> str:
    return text if len(text) <= room else text[: max(0, room - 1)] + "…"
