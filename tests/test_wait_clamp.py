"""Every wait is clamped to an hour (DESIGN 3.1), on every path: the Python API, the tools on
both wire formats, `subsessions mcp` and `subsessions serve`.

The hour is made CAP_MS here (`children.MAX_TIMEOUT_MS`, monkeypatched in this process, or set
by tests/capped_wait.py in a server's), and each wait asks for more than that while its child is
held. A clamped wait ends after CAP_MS and says so in the design's label (`did not complete within
{CAP_MS}ms`); a wait asked for ABOVE_MS would name that instead, and one asked for HUGE_MS would
hang (the child is released only after the wait has answered), which the test's bound fails.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import pytest
from fake_openai import FakeOpenAI, Recorded, Reply, call, calls, fake_openai, text
from openai_support import cli_env, tool_outputs
from scripting import WORKER, Script, spawn_held
from scripting import script as script  # the fixture
from test_openai_models import Api, engine_on, is_worker
from test_openai_models import api as api  # the fixture

from subsessions import ChildTimeout, Engine, SessionConfig, children

__all__ = ["fake_openai"]

CAP_MS = 50
ABOVE_MS = 400  # above the cap, and short: a missed clamp shows in the label at once
HUGE_MS = 10**12  # about 31 years: a missed clamp waits until the test's bound
CAPPED = Path(__file__).with_name("capped_wait.py")
# A missed clamp hangs a wait on HUGE_MS: fail well inside the usual minute.
pytestmark = pytest.mark.timeout(30)


def label(session_id: str) -> str:
    return f"session {session_id} did not complete within {CAP_MS}ms"


@pytest.fixture(autouse=True)
def capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(children, "MAX_TIMEOUT_MS", CAP_MS)


# -- the Python API -------------------------------------------------------------------------
@pytest.mark.parametrize("seconds", [ABOVE_MS / 1000, HUGE_MS / 1000, math.inf],
                         ids=["above", "huge", "infinite"])
async def test_wait_child_is_clamped_and_names_the_clamped_wait(
    home: Path, script: Script, seconds: float
) -> None:
    async with Engine(home, model_client=script.model) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        cid = await spawn_held(parent, script, "held")
        with pytest.raises(ChildTimeout) as caught:
            await parent.subsessions.wait_child(cid, timeout=seconds)
        assert str(caught.value) == label(cid)
        assert caught.value.timeout_ms == CAP_MS
        script.answer("held", ["released"])
        assert await parent.subsessions.wait_child(cid) == "released"


async def test_waits_on_many_and_runs_are_clamped(home: Path, script: Script) -> None:
    async with Engine(home, model_client=script.model) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        manager = parent.subsessions
        cid = await spawn_held(parent, script, "held")
        assert (await manager.wait_any([cid], HUGE_MS / 1000)).timed_out
        assert (await manager.wait_all([cid], math.inf)).timed_out
        script.hold("run one", "run two")
        parallel = await manager.run_parallel([("worker", "run one")], HUGE_MS / 1000)
        chain = await manager.run_chain([("worker", "run two")], math.inf)
        assert parallel.timed_out and chain.timed_out
        for prompt in ("held", "run one", "run two"):
            script.answer(prompt, ["released"])
        ids = [cid, *(s.child.session_id for r in (parallel, chain) for s in r.steps if s.child)]
        assert (await manager.wait_all(ids)).children[cid].result == "released"


# -- the tools, on both wire formats --------------------------------------------------------
def delegating_parent(release: asyncio.Event) -> Any:
    """The parent's model: spawns a held worker, waits on it with each wait tool above the
    cap, runs one more held worker, then releases them and reports what the tools said."""

    async def script(request: Recorded) -> Reply:
        if is_worker(request):
            await release.wait()
            return text("released")
        done = tool_outputs(request)
        child = json.loads(done[0])["session_id"] if done else ""
        if not done:
            return calls(call("create_session", {"session_type": "worker", "prompt": "held"}))
        if len(done) == 1:
            return calls(call("wait_session", {"session_id": child, "timeout_ms": ABOVE_MS}))
        if len(done) == 2:
            return calls(call("wait_session", {"session_id": child, "timeout_ms": HUGE_MS}))
        if len(done) == 3:
            return calls(call("wait_sessions", {"session_ids": [child], "mode": "all",
                                                "timeout_ms": HUGE_MS}))
        if len(done) == 4:
            return calls(call("run_sessions", {"mode": "parallel", "timeout_ms": HUGE_MS,
                                               "tasks": [{"session_type": "worker",
                                                          "prompt": "held too"}]}))
        release.set()
        return text(json.dumps(done[1:]))

    return script


async def test_the_wait_tools_are_clamped_on_either_wire(
    fake_openai: FakeOpenAI, api: Api, home: Path, tmp_path: Path
) -> None:
    release = asyncio.Event()
    fake_openai.script = delegating_parent(release)
    async with engine_on(fake_openai, api, home, tmp_path) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        said = json.loads(await parent.send_and_wait("delegate") or "")
        child = parent.subsessions.children()[0].session_id
        assert said[:2] == [label(child), label(child)]
        assert json.loads(said[2])["timed_out"] is True
        assert json.loads(said[3])["timed_out"] is True
        done = await parent.subsessions.wait_all([c.session_id
                                                  for c in parent.subsessions.children()])
        assert {c.result for c in done.children.values()} == {"released"}


# -- subsessions mcp --------------------------------------------------------------------------
@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[TextIO]:
    with (tmp_path / "server-stderr.log").open("w+") as log:
        yield log


async def test_the_mcp_tools_are_clamped(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, errlog: TextIO
) -> None:
    pytest.importorskip("mcp", reason="pip install 'subsessions[mcp]'")
    from mcp import ClientSession, StdioServerParameters, stdio_client
    from mcp_support import Children, create, error, ok, server_args

    held = Children()
    fake_openai.script = held
    held.gate("held")
    held.gate("held too")
    args = [str(CAPPED), str(CAP_MS), *server_args(home, fake_openai)[2:]]
    params = StdioServerParameters(command=sys.executable, args=args, cwd=str(tmp_path),
                                   env=cli_env())
    async with (stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session):
        await session.initialize()
        child = await create(session, "held")
        for timeout_ms in (ABOVE_MS, HUGE_MS):
            assert error(await session.call_tool("wait_session", {
                "session_id": child, "timeout_ms": timeout_ms})) == label(child)
        assert ok(await session.call_tool("wait_sessions", {
            "session_ids": [child], "mode": "any", "timeout_ms": HUGE_MS}))["timed_out"] is True
        ran = await session.call_tool("run_sessions", {
            "mode": "chain", "timeout_ms": HUGE_MS,
            "tasks": [{"session_type": "default", "prompt": "held too"}]})
        assert ok(ran)["timed_out"] is True
        held.gate("held").set()
        held.gate("held too").set()
        assert ok(await session.call_tool("wait_session", {
            "session_id": child, "timeout_ms": HUGE_MS})) == {"result": "answer to held"}


# -- subsessions serve ------------------------------------------------------------------------
async def test_the_tools_of_a_served_session_are_clamped(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI
) -> None:
    from serve_support import CHECKER, checker_agent, copilot, python_client

    release = asyncio.Event()

    async def script(request: Recorded) -> Reply:
        if CHECKER in str(request.body.get("instructions", "")):
            await release.wait()
            return text("released")
        done = tool_outputs(request)
        if not done:
            return calls(call("create_session", {"session_type": "checker", "prompt": "go"}))
        child = json.loads(done[0])["session_id"]
        if len(done) in (1, 2):
            wanted = ABOVE_MS if len(done) == 1 else HUGE_MS
            return calls(call("wait_session", {"session_id": child, "timeout_ms": wanted}))
        if len(done) == 3:
            return calls(call("wait_sessions", {"session_ids": [child], "mode": "any",
                                                "timeout_ms": HUGE_MS}))
        release.set()
        return text(json.dumps([child, *done[1:]]))

    fake_openai.script = script
    async with python_client(home, fake_openai, tmp_path, cap_ms=CAP_MS) as client:
        session = await client.create_session(
            on_permission_request=copilot.PermissionHandler.approve_all,
            custom_agents=[checker_agent(None)])
        reply = await session.send_and_wait("delegate", timeout=25)
    assert reply is not None
    child, above, huge, many = json.loads(reply.data.content)
    assert above == huge == label(child)
    assert json.loads(many)["timed_out"] is True
