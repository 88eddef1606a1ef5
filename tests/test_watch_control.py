"""`c` and `m` in the live view under Textual's pilot, against a live engine in the same loop
(scripted model): through its control socket the selected child is cancelled, or gets a
message; an engine without a socket is named as such in the status line."""

from __future__ import annotations

from pathlib import Path

import pytest
from scripting import WORKER, Script, call, spawn_held
from scripting import script as script  # the fixture

pytest.importorskip("textual", reason="the live view needs pip install 'subsessions[watch]'")

from test_watch_app import SIZE, shown, until
from textual.pilot import Pilot
from textual.widgets import Static

from subsessions import ChildCancelled, Engine, SessionConfig
from subsessions.watch.app import WatchApp
from subsessions.watch.follower import Follower
from subsessions.watch.prompt import MessageScreen
from subsessions.watch.table import SessionTable

CONFIG = SessionConfig(custom_agents=(WORKER,), control=True)


def status(app: WatchApp) -> str:
    return str(app.query_one("#status", Static).render())


async def select(pilot: Pilot[None], app: WatchApp, session_id: str) -> None:
    """Wait for the session's row, then move the selection onto it with the arrows."""
    table = app.query_one(SessionTable)
    await until(pilot, lambda: any(key == session_id for key, _ in table.lines))
    while table.selected != session_id:
        await pilot.press("down")


def watch_app(home: Path) -> WatchApp:
    follower = Follower(str(home))
    follower.open()
    return WatchApp(follower, interval=0.05)


async def test_c_cancels_the_selected_running_child_through_its_engines_socket(
    home: Path, script: Script
) -> None:
    async with Engine(home, model_client=script.model) as engine:
        root = await engine.create_session(CONFIG)
        cid = await spawn_held(root, script, "long job")
        app = watch_app(home)
        async with app.run_test(size=SIZE) as pilot:
            await select(pilot, app, cid)
            await pilot.press("c")
            with pytest.raises(ChildCancelled):
                await root.subsessions.wait_child(cid)
            await until(pilot, lambda: "cancelled " in app.note)
            assert script.cancelled == ["long job"]
            await until(pilot, lambda: any(" cancelled " in line for line in shown(app)))
            assert app.note in status(app)
            await pilot.press("c")  # again: the engine says there is nothing to cancel
            await until(pilot, lambda: "was not running" in app.note)
            await pilot.press("q")


async def test_m_asks_for_a_message_and_sends_it_to_the_selected_child(
    home: Path, script: Script
) -> None:
    async with Engine(home, model_client=script.model) as engine:
        root = await engine.create_session(CONFIG)
        cid = await spawn_held(root, script, "draft")
        app = watch_app(home)
        async with app.run_test(size=SIZE) as pilot:
            await select(pilot, app, cid)
            await pilot.press("m")
            await until(pilot, lambda: isinstance(app.screen, MessageScreen))
            await pilot.press("escape")  # given up: nothing sent
            await until(pilot, lambda: "no message sent" in app.note)
            await pilot.press("m")
            await until(pilot, lambda: isinstance(app.screen, MessageScreen))
            await pilot.press(*"shorter", "space", *"please", "enter")
            await until(pilot, lambda: "message queued" in app.note)
            assert not isinstance(app.screen, MessageScreen)
            script.answer("draft", [call("noop_missing")])  # it goes on: the message is next
            assert await root.subsessions.wait_child(cid) == "answer to shorter please"
            await pilot.press("q")


async def test_without_a_control_socket_c_and_m_say_so(home: Path, script: Script) -> None:
    async with Engine(home, model_client=script.model) as engine:
        root = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        cid = await spawn_held(root, script, "uncontrolled")
        app = watch_app(home)
        async with app.run_test(size=SIZE) as pilot:
            await select(pilot, app, cid)
            await pilot.press("c")
            await until(pilot, lambda: app.note.startswith("cancel: no engine with a control "
                                                            "socket runs"))
            assert "--control" in status(app)
            await pilot.press("m")
            await until(pilot, lambda: app.note.startswith("message: no engine"))
            assert not isinstance(app.screen, MessageScreen)
            assert root.subsessions.status(cid).running
            await pilot.press("q")
        await root.subsessions.cancel_child(cid)
