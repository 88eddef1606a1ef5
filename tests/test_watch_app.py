"""The live view under Textual's own pilot (`App.run_test()`): rows, arrows, Enter for the
transcript, q to quit, and the rows following appends and new files as they happen."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from watch_support import Rollout, day_folder, long_rollout

pytest.importorskip("textual", reason="the live view needs pip install 'subsessions[watch]'")

from textual.pilot import Pilot
from textual.widgets import RichLog, Static

from subsessions.rollouts import read_rollout
from subsessions.watch.app import TranscriptScreen, WatchApp
from subsessions.watch.cells import amount
from subsessions.watch.follower import Follower
from subsessions.watch.table import SessionTable

SIZE = (170, 24)
BOUND = 10.0  # seconds a change may take to show before the test gives up


def shown(app: WatchApp) -> list[str]:
    """The table's lines as drawn on the screen (the visible ones)."""
    table = app.query_one(SessionTable)
    return ["".join(segment.text for segment in table.render_line(y)).rstrip()
            for y in range(min(table.size.height, len(table.lines)))]


async def until(pilot: Pilot[None], check: Callable[[], bool]) -> None:
    """Let the app run until `check()` holds, for at most BOUND seconds."""
    for _ in range(int(BOUND / 0.05)):
        if check():
            return
        await pilot.pause(0.05)
    assert check()


def tree(home: Path) -> tuple[Rollout, Rollout, Rollout]:
    parent = Rollout(home)
    parent.start("split the work")
    parent.model_call(300, 40)
    first = Rollout(home, parent=parent, profile="tester")
    first.start("run the tests")
    second = Rollout(home, parent=parent, profile="mathematician")
    second.start("add 2 and 2")
    second.model_call(20, 2)
    second.complete("4")
    return parent, first, second


def app_for(home: Path) -> WatchApp:
    follower = Follower(str(home))
    follower.open()
    return WatchApp(follower, interval=0.05)


async def test_rows_arrows_enter_and_q(tmp_path: Path) -> None:
    parent, first, second = tree(tmp_path)
    app = app_for(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        header = app.query_one("#header", Static).render()
        assert str(header).split()[:4] == ["SESSION", "PROFILE", "MODEL", "STATUS"]
        lines = shown(app)
        assert [line.split()[1:4] for line in lines] == [
            ["exec", "m-1", "running"], ["tester", "m-1", "running"],
            ["mathematician", "m-1", "completed"]]
        assert lines[1].startswith("  ") and lines[2].startswith("  ")
        assert lines[0].endswith("split the work") and lines[2].endswith("4")
        assert "3 · 320/42 · 0 (2 running)" in lines[0]
        table = app.query_one(SessionTable)
        assert table.selected == parent.id
        await pilot.press("down", "down")
        assert table.selected == second.id
        await pilot.press("up")
        assert table.selected == first.id
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, TranscriptScreen))
        log = app.screen.query_one(RichLog)
        await until(pilot, lambda: any("run the tests" in line.text for line in log.lines))
        assert first.id in str(app.screen.query_one("#title", Static).render())
        first.complete("all 12 pass")  # the open transcript follows the file
        await until(pilot, lambda: any("all 12 pass" in line.text for line in log.lines))
        await pilot.press("escape")
        assert not isinstance(app.screen, TranscriptScreen)
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running)
    assert app.return_code == 0


async def test_appends_and_new_files_show_while_it_runs(tmp_path: Path) -> None:
    parent, first, _second = tree(tmp_path)
    app = app_for(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("down")  # the selection stays on its session as rows move
        table = app.query_one(SessionTable)
        assert table.selected == first.id

        first.model_call(1500, 200)
        first.tool_call("shell", "ok")
        await until(pilot, lambda: shown(app)[1].split()[4:8] == ["1", "1.5k", "200", "1"])
        assert "3 · 1.8k/242 · 1 (2 running)" in shown(app)[0]

        third = Rollout(tmp_path, parent=parent, profile="linter_fixer")  # a new child file
        third.start("lint it")
        await until(pilot, lambda: len(shown(app)) == 4)
        assert shown(app)[3].split()[1:4] == ["linter_fixer", "m-1", "running"]
        assert "4 · 1.8k/242 · 1 (3 running)" in shown(app)[0]
        assert table.selected == first.id

        other = Rollout(tmp_path)  # a new top-level session goes on top
        other.start("something else")
        await until(pilot, lambda: len(shown(app)) == 5)
        assert shown(app)[0].endswith("something else")
        assert table.selected == first.id and table.cursor == 2

        third.fail("boom")
        await until(pilot, lambda: " failed " in shown(app)[4])
        assert shown(app)[4].endswith("error: boom")


async def test_damaged_files_show_marked(tmp_path: Path) -> None:
    tree(tmp_path)
    folder = day_folder(tmp_path)
    (folder / "rollout-2026-01-01T00-00-00-01a20000-0000-7000-8000-000000000001.jsonl"
     ).write_bytes(b"not json at all\n")
    app = app_for(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        [bad] = [line for line in shown(app) if "damaged" in line]
        assert "! not a subsessions rollout (no session_meta" in bad
        await pilot.press("end", "enter")  # its transcript says what is wrong, too
        await until(pilot, lambda: isinstance(app.screen, TranscriptScreen))
        log = app.screen.query_one(RichLog)
        await until(pilot, lambda: any("not a rollout record" in line.text for line in log.lines))
        await pilot.press("q", "q")
        await until(pilot, lambda: not app.is_running)


async def test_a_long_rollout_catches_up_over_polls_never_shown_interrupted(
    tmp_path: Path,
) -> None:
    session = long_rollout(tmp_path)  # 20 MB, completed, its writer gone; read a few MB a poll
    turns = len(read_rollout(session.path).events("token_count"))
    app = app_for(tmp_path)
    drawn: list[str] = []
    async with app.run_test(size=SIZE) as pilot:

        def caught_up() -> bool:
            [line] = shown(app)
            drawn.append(line)
            return line.split()[3] != "loading"

        await until(pilot, caught_up)
        assert {line.split()[3] for line in drawn} <= {"loading", "completed"}
        assert not any("!" in line for line in drawn)  # a line still to be read is not torn
        assert drawn[-1].split()[3:7] == [
            "completed", str(turns), amount(session.tokens[0]), amount(session.tokens[1])]
        assert drawn[-1].endswith("every log read")
        await pilot.press("q")
        await until(pilot, lambda: not app.is_running)
