"""What `subsessions batch` shows while it runs: a bar on a terminal, plain lines elsewhere.

The display polls the batch's `Counters` on its own timer, so a batch pays nothing per item
for it. The bar is `rich`'s progress display (the `[batch]` extra, imported only here and only
on a terminal); without a terminal, or without rich, one line every few seconds.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol, TextIO

from attrs import define

from subsessions.batch.runner import Counters


class Display(Protocol):
    def show(self, counters: Counters, final: bool = False) -> None: ...
    def close(self) -> None: ...


def rate_and_eta(counters: Counters) -> tuple[float, float | None]:
    """Items ended per second in this run, and the seconds left at that rate."""
    ran = counters.ended - counters.skipped
    elapsed = max(time.monotonic() - counters.started_at, 1e-9)
    rate = ran / elapsed
    left = counters.total - counters.ended
    return rate, (left / rate if rate > 0 else None)


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def line(counters: Counters) -> str:
    rate, eta = rate_and_eta(counters)
    return (f"{counters.ended}/{counters.total} done ({counters.completed} completed, "
            f"{counters.failed} failed, {counters.cancelled} cancelled), {counters.running} "
            f"running, {counters.tokens:,} tokens, {rate:.1f} items/s, ETA {_clock(eta)}")


@define
class Lines:
    """One plain line at most every `every` seconds (logs, pipes, CI)."""

    _stream: TextIO
    _every: float
    _last: float = 0.0

    def show(self, counters: Counters, final: bool = False) -> None:
        now = time.monotonic()
        if final or now - self._last >= self._every:
            self._last = now
            self._stream.write(f"subsessions batch: {line(counters)}\n")
            self._stream.flush()

    def close(self) -> None:
        pass


@define
class Bar:
    """rich's progress bar, refreshed by `show` only (no thread of its own)."""

    _progress: Any
    _task: Any

    @classmethod
    def open(cls, stream: TextIO, total: int, terminal: bool | None = None) -> Bar:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        progress = Progress(
            BarColumn(), MofNCompleteColumn(),
            TextColumn("[green]{task.fields[ok]} completed[/] "
                       "[red]{task.fields[failed]} failed[/] "
                       "{task.fields[running]} running, {task.fields[tokens]} tokens, "
                       "{task.fields[rate]}, ETA {task.fields[eta]}"),
            console=Console(file=stream, force_terminal=terminal), auto_refresh=False,
            transient=False)
        task = progress.add_task("batch", total=total, **cls._fields(None))
        progress.start()
        return cls(progress, task)

    @staticmethod
    def _fields(counters: Counters | None) -> dict[str, Any]:
        if counters is None:
            return {"ok": 0, "failed": 0, "running": 0, "tokens": 0, "rate": "-",
                    "eta": "?"}
        rate, eta = rate_and_eta(counters)
        return {"ok": counters.completed, "failed": counters.failed,
                "running": counters.running, "tokens": f"{counters.tokens:,}",
                "rate": f"{rate:.1f} items/s", "eta": _clock(eta)}

    def show(self, counters: Counters, final: bool = False) -> None:
        self._progress.update(self._task, completed=counters.ended, **self._fields(counters))
        self._progress.refresh()

    def close(self) -> None:
        self._progress.stop()


def choose(stream: TextIO, total: int, every: float) -> Display:
    """A bar on a terminal (when rich is installed), else plain lines."""
    if stream.isatty():
        try:
            return Bar.open(stream, total)
        except ImportError:
            pass
    return Lines(stream, every)


async def follow(counters: Counters, display: Display, every: float) -> None:
    """Show the counters every `every` seconds until cancelled, then once more."""
    try:
        while True:
            display.show(counters)
            await asyncio.sleep(every)
    finally:
        display.show(counters, final=True)
        display.close()
