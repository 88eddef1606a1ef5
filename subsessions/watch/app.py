"""The live view: the session table, refreshed on a timer, and a transcript screen per session.

Each tick polls the follower (a `stat` per followed file, appended bytes only); the
rows are rebuilt when something changed, or once a second while a session runs (its
clock moves), and the table repaints only the lines that differ. `c` and `m` ask the
selected session's engine through its control socket, in a worker: the view never waits.
"""

from __future__ import annotations

import os
import time
from typing import ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Footer, RichLog, Static

from subsessions.rollouts.render import Style, render_record
from subsessions.rollouts.summary import as_record
from subsessions.watch import control
from subsessions.watch.cells import Cells, row_cells, short_ids
from subsessions.watch.follower import Follower, read_appended
from subsessions.watch.forest import Row, build_rows
from subsessions.watch.prompt import MessageScreen
from subsessions.watch.stats import SessionStats
from subsessions.watch.table import SessionTable

_REDRAW = 0.5  # seconds between redraws at the least: appends show within this plus a poll


class WatchApp(App[None]):
    """`subsessions watch`: one row per session, live."""

    TITLE = "subsessions watch"
    CSS = """
    #header { height: 1; text-style: bold; }
    SessionTable { height: 1fr; }
    #status { height: 1; color: $text-muted; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "quit"), Binding("c", "cancel", "cancel"),
        Binding("m", "message", "message")]

    def __init__(self, follower: Follower, interval: float = 0.25) -> None:
        super().__init__()
        self.follower = follower
        self.interval = interval
        self._second = 0
        self._shorts: dict[str, str] = {}
        self._header = ""
        self._status = ""
        self.note = ""  # what the last `c` or `m` came to, shown in the status line
        self._live = 0
        self._stale = False  # polled changes not drawn yet
        self._drawn = 0.0
        self._cells: dict[str, tuple[tuple[object, ...], Cells]] = {}

    def compose(self) -> ComposeResult:
        yield Static(id="header", markup=False)
        yield SessionTable()
        yield Static(id="status", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(SessionTable).focus()
        self._update()
        self.set_interval(self.interval, self._tick)

    def _tick(self) -> None:
        self._stale = self.follower.poll() or self._stale
        now = time.time()
        if now - self._drawn < _REDRAW:
            return  # a burst of appends is drawn twice a second, not at every poll
        if self._stale or (self._live and int(now) != self._second):
            self._update()  # a running session's clock moves once a second

    def _update(self) -> None:
        now = self._drawn = time.time()
        self._second = int(now)
        self._stale = False
        follower = self.follower
        rows = build_rows(follower.sessions, follower.alive)
        if len(self._shorts) != len(rows):
            self._shorts = short_ids([row.stats.key for row in rows])
        table = self.query_one(SessionTable)
        lines = [(row.stats.key, self._cells_of(row, now)) for row in rows]
        table.show(lines)
        header = table.header()
        if header != self._header:
            self._header = header
            self.query_one("#header", Static).update(header)
        running = self._live = sum(row.status == "running" for row in rows)
        status = f"{follower.home}: {len(rows)} sessions, {running} running"
        if follower.hidden and follower.root is None:
            status += f" ({follower.hidden} older not shown: --limit 0 shows every one)"
        if self.note:
            status += f"  |  {self.note}"
        if status != self._status:
            self._status = status
            self.query_one("#status", Static).update(status)

    def _cells_of(self, row: Row, now: float) -> Cells:
        """A row's cells, made again only when something they show changed."""
        short = self._shorts[row.stats.key]
        clock = int(now) if row.status == "running" else 0
        seen = (row.stats.version, row.status, row.depth, row.totals, short, clock)
        cached = self._cells.get(row.stats.key)
        if cached is not None and cached[0] == seen:
            return cached[1]
        cells = row_cells(row, short, now)
        self._cells[row.stats.key] = (seen, cells)
        return cells

    # -- control: c cancels, m sends a message (the engine's socket) ------------------
    def _selected(self) -> tuple[str, str] | None:
        """The selected session's id and short id; None (and a note) when there is none."""
        key = self.query_one(SessionTable).selected
        stats = self.follower.sessions.get(key) if key is not None else None
        if stats is None or stats.session_id is None:
            self._tell("select a session first" if stats is None else
                       "the selected row has no session id (not a rollout)")
            return None
        return stats.session_id, self._shorts.get(stats.key, stats.key)

    def _tell(self, note: str) -> None:
        self.note = note
        self._update()

    def action_cancel(self) -> None:
        selected = self._selected()
        if selected is not None:
            self._tell(f"cancelling {selected[1]}…")
            self.run_worker(self._cancel(*selected), group="control")

    async def _cancel(self, session_id: str, short: str) -> None:
        self._tell(await control.cancel(self.follower.home, session_id, short))

    def action_message(self) -> None:
        selected = self._selected()
        if selected is not None:
            self.run_worker(self._message(*selected), group="control")

    async def _message(self, session_id: str, short: str) -> None:
        path = await control.engine_of(self.follower.home, session_id)
        if path is None:
            self._tell(control.NO_SOCKET.format(what="message", short=short))
            return
        text = await self.push_screen_wait(MessageScreen(short))
        if text is None:
            self._tell(f"no message sent to {short}")
            return
        self._tell(await control.send(path, session_id, text, short))

    def on_session_table_chosen(self, message: SessionTable.Chosen) -> None:
        stats = self.follower.sessions.get(message.key)
        if stats is not None:
            self.push_screen(TranscriptScreen(stats, self.interval))


class TranscriptScreen(Screen[None]):
    """One session's rollout as `rollouts show` renders it, growing as the file grows."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "back"), Binding("q", "app.pop_screen", "back")]

    def __init__(self, stats: SessionStats, interval: float) -> None:
        super().__init__()
        self.stats = stats
        self.interval = interval
        self._consumed = 0
        self._torn = b""
        self._number = 0  # lines read
        self._style = Style(True)
        self._problem = ""

    def compose(self) -> ComposeResult:
        stats = self.stats
        who = stats.profile or stats.source_kind
        yield Static(f"session {stats.session_id or stats.key}  ({who})  {stats.path}",
                     id="title", markup=False)
        yield RichLog(wrap=True, markup=False, highlight=False)
        yield Footer()

    def on_mount(self) -> None:
        self.call_after_refresh(self._more)  # once the log has its width, to wrap to it
        self.set_interval(self.interval, self._more)

    def _more(self) -> None:
        log = self.query_one(RichLog)
        try:
            size = os.stat(self.stats.path, follow_symlinks=False).st_size
            data = read_appended(self.stats.path, self._consumed, size) \
                if size > self._consumed else b""
        except OSError as exc:
            problem = f"! cannot read: {exc.strerror or exc}"
            if problem != self._problem:
                self._problem = problem
                log.write(Text(problem, style="magenta"))
            return
        self._consumed += len(data)
        lines = (self._torn + data).split(b"\n")
        self._torn = lines.pop()
        for line in lines:
            self._number += 1
            record = as_record(line)
            if record is None:
                if line.strip():
                    log.write(Text(f"! line {self._number}: not a rollout record",
                                   style="magenta"))
                continue
            for shown in render_record(record, self._style):
                log.write(Text.from_ansi(shown))
