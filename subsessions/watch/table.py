"""The rows of the live view as a Textual line widget: only changed lines are drawn again.

Textual's `DataTable` redraws every visible line on any cell update (about 60 ms a
tick here with a few cells changing), which a 1,000-child fan-out would pay several
times a second; this widget draws a line only when its cells, its width or the
selection changed, and asks Textual to repaint just those lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from subsessions.watch.cells import (
    COLUMNS,
    MESSAGE,
    STATUS,
    Cells,
    cut,
    join,
    padded,
    widths_of,
)

_STATUS_STYLES = {
    "completed": Style(color="green"), "failed": Style(color="red"),
    "cancelled": Style(color="yellow"), "running": Style(color="cyan", bold=True),
    "interrupted": Style(color="magenta"), "idle": Style(dim=True),
    "damaged": Style(color="red", bold=True), "loading": Style(dim=True, italic=True),
}
_PLAIN = Style()
_SELECTED = Style(reverse=True)
_NOTE = Style(color="magenta")

Line = tuple[str, Cells]  # (key, cells)


class SessionTable(ScrollView, can_focus=True):
    """One line per session; the cursor stays on its session when lines move."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "move(-1)", "up", show=False),
        Binding("down", "move(1)", "down", show=False),
        Binding("pageup", "page(-1)", show=False),
        Binding("pagedown", "page(1)", show=False),
        Binding("home", "move(-1000000000)", show=False),
        Binding("end", "move(1000000000)", show=False),
        Binding("enter", "choose", "transcript"),
    ]

    class Chosen(Message):
        """Enter on a session."""

        def __init__(self, key: str) -> None:
            self.key = key
            super().__init__()

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[Line] = []
        self.widths: list[int] = [len(column.title) for column in COLUMNS]
        self.cursor = 0
        self._strips: dict[Line, Strip] = {}  # drawn lines (unselected), at the current widths
        self._drawn_for = 0  # the widget width the strips were cut to

    @property
    def selected(self) -> str | None:
        return self.lines[self.cursor][0] if self.lines else None

    def header(self) -> str:
        return join(tuple(column.title for column in COLUMNS), self.widths)

    def show(self, lines: Sequence[Line]) -> bool:
        """Take the new lines; repaint those that differ. Whether the column widths grew."""
        selected = self.selected
        widths = [max(old, new) for old, new in zip(self.widths, widths_of(
            [cells for _, cells in lines] or [tuple(c.title for c in COLUMNS)]), strict=True)]
        widths[MESSAGE] = 0  # the last message takes what is left
        grew = widths != self.widths
        old = self.lines
        self.lines = list(lines)
        self.widths = widths
        if selected is not None:
            self.cursor = next((at for at, (key, _) in enumerate(self.lines) if key == selected),
                               min(self.cursor, max(0, len(self.lines) - 1)))
        self.virtual_size = Size(self.size.width, len(self.lines))
        if grew or len(old) != len(self.lines):
            self._strips.clear()
            self.refresh()
        else:
            top = self.scroll_offset.y
            for at in range(top, min(len(self.lines), top + self.size.height)):
                if old[at] != self.lines[at] or at == self.cursor:
                    self.refresh_line(at)
        return grew

    def render_line(self, y: int) -> Strip:
        at = y + self.scroll_offset.y
        width = self.size.width
        if at >= len(self.lines):
            return Strip.blank(width)
        if width != self._drawn_for:
            self._strips.clear()
            self._drawn_for = width
        line = self.lines[at]
        strip = self._strips.get(line)
        if strip is None:
            strip = self._strips[line] = self._draw(line[1], width)
            if len(self._strips) > 4 * max(1, len(self.lines)):
                self._strips = {line: strip}
        return strip.apply_style(_SELECTED) if at == self.cursor else strip

    def _draw(self, cells: Cells, width: int) -> Strip:
        parts = padded(cells[:MESSAGE], self.widths)
        left = "  ".join(parts[:STATUS]) + "  "
        middle = "  " + "  ".join(parts[STATUS + 1:]) + "  "
        room = width - len(left) - len(parts[STATUS]) - len(middle)
        message = cells[MESSAGE]
        segments = [
            Segment(left),
            Segment(parts[STATUS], _STATUS_STYLES.get(cells[STATUS], _PLAIN)),
            Segment(middle),
            Segment(cut(message, max(0, room)), _NOTE if message.startswith("! ") else _PLAIN),
        ]
        return Strip(segments).crop_extend(0, width, None)

    def action_move(self, by: int) -> None:
        self._go(self.cursor + by)

    def action_page(self, by: int) -> None:
        self._go(self.cursor + by * max(1, self.size.height - 1))

    def action_choose(self) -> None:
        if self.selected is not None:
            self.post_message(self.Chosen(self.selected))

    def _go(self, at: int) -> None:
        if not self.lines:
            return
        before = self.cursor
        self.cursor = max(0, min(len(self.lines) - 1, at))
        top = self.scroll_offset.y
        height = max(1, self.size.height)
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False, immediate=True)
        elif self.cursor >= top + height:
            self.scroll_to(y=self.cursor - height + 1, animate=False, immediate=True)
        self.refresh_line(before)
        self.refresh_line(self.cursor)
