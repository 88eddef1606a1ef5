"""The public facade, and what the configuration objects refuse up front."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import orjson
import pytest

import subsessions
from subsessions import (
    Engine,
    Hooks,
    InvalidArguments,
    ScriptedModel,
    SessionConfig,
    SubsessionError,
    Tool,
)


def test_every_public_name_is_exported_and_importable() -> None:
    assert subsessions.__all__ == sorted(subsessions.__all__)
    for name in subsessions.__all__:
        assert hasattr(subsessions, name), name
    for name in ("Engine", "Session", "SessionConfig", "Profile", "Tool", "Hooks",
                 "ScriptedModel", "ChildStatus", "load_profiles"):
        assert name in subsessions.__all__


def test_every_exported_error_derives_from_the_one_base() -> None:
    errors = [getattr(subsessions, n) for n in subsessions.__all__
              if inspect.isclass(getattr(subsessions, n))
              and issubclass(getattr(subsessions, n), BaseException)]
    assert len(errors) >= 20
    assert all(issubclass(e, SubsessionError) for e in errors)


def test_importing_the_package_does_not_import_the_optional_sdks() -> None:
    import subprocess
    import sys

    code = "import sys, subsessions; print('openai' in sys.modules, 'mcp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"tools": [{"name": "x"}]}, "tools must hold Tool objects"),
        ({"custom_agents": ["tester"]}, "custom_agents must hold Profile objects"),
        ({"hooks": {"on_pre_tool_use": print}}, "hooks has the wrong type"),
        ({"model": 5}, "model has the wrong type"),
        ({"max_depth": -1}, "max_depth must be a non-negative integer"),
        ({"max_children": True}, "max_children must be a non-negative integer"),
        ({"max_turns": 0}, "max_turns must be an integer of at least 1"),
        ({"tools": [Tool("create_session", "mine")]}, "'create_session' is the engine's own"),
        ({"tools": [Tool("shell", "mine")], "builtin_tools": True}, "'shell' is the engine's"),
        ({"tools": [Tool("a", "1"), Tool("a", "2")]}, "tool names must be unique"),
    ],
)
def test_a_bad_session_config_is_refused_with_a_clear_message(
    kwargs: dict[str, object], problem: str
) -> None:
    with pytest.raises((TypeError, ValueError), match=problem):
        SessionConfig(**kwargs)  # type: ignore[arg-type]


def test_a_path_cwd_is_kept_as_text_and_a_shell_tool_is_fine_without_builtins(
    tmp_path: Path,
) -> None:
    config = SessionConfig(cwd=tmp_path, tools=[Tool("shell", "the host's own shell")],
                           hooks=Hooks())
    assert config.cwd == str(tmp_path)


def test_an_engine_home_with_a_nul_byte_is_refused() -> None:
    with pytest.raises(InvalidArguments, match="NUL"):
        Engine("/tmp/a\0b", model_client=ScriptedModel([]))


async def test_a_deferred_tool_nobody_listens_for_fails_at_once(home: Path) -> None:
    deferred = Tool("later", "answered by the host", handler=None)
    model = ScriptedModel([[{"type": "function_call", "name": "later", "arguments": {}}],
                           ["done"]])
    async with Engine(home, model_client=model) as engine:
        session = await engine.create_session(SessionConfig(tools=[deferred]))
        assert await session.send_and_wait("go") == "done"
    output = model.requests[-1].items[-1]
    assert output["success"] is False
    assert output["output"] == "Tool 'later' is not supported by this client instance."


async def test_a_malformed_model_message_fails_the_task_clearly(home: Path) -> None:
    bad = {"type": "message", "role": "assistant", "content": [{"type": "output_text",
                                                                "text": 42}]}
    async with Engine(home, model_client=ScriptedModel([[bad]])) as engine:
        session = await engine.create_session()
        with pytest.raises(subsessions.ModelError, match="content must be a list of parts"):
            await session.send_and_wait("go")


@pytest.mark.parametrize("ids", ["abc", [None], [("x",)]])
async def test_wait_many_refuses_what_is_not_a_list_of_ids(home: Path, ids: object) -> None:
    async with Engine(home, model_client=ScriptedModel([])) as engine:
        session = await engine.create_session()
        with pytest.raises(InvalidArguments, match="session_ids must be a list of ids"):
            await session.subsessions.wait_any(ids)  # type: ignore[arg-type]
        with pytest.raises(InvalidArguments, match="timeout must be a number"):
            await session.subsessions.wait_all([], timeout="1")  # type: ignore[arg-type]
        with pytest.raises(InvalidArguments, match="pairs"):
            await session.subsessions.run_parallel([("tester",)])  # type: ignore[list-item]


async def test_run_sessions_children_nest_under_the_runs_tool_call(home: Path) -> None:
    run = {"type": "function_call", "name": "run_sessions", "call_id": "call_run",
           "arguments": {"mode": "parallel", "timeout_ms": 10_000,
                         "tasks": [{"session_type": "default", "prompt": "a"},
                                   {"session_type": "default", "prompt": "b"}]}}

    def script(request: subsessions.ModelRequest) -> list[object]:
        if request.items[0]["content"][0]["text"] == "go":
            return [run] if len(request.items) == 1 else ["done"]
        return ["child answer"]

    started: list[str] = []
    async with Engine(home, model_client=ScriptedModel(script)) as engine:
        session = await engine.create_session()
        session.on(lambda e: started.append(e.data["tool_call_id"])
                   if e.type == "subagent.started" else None)
        assert await session.send_and_wait("go") == "done"
    assert started == ["call_run:0", "call_run:1"]


async def test_tool_definitions_follow_the_agents_allowlist(home: Path) -> None:
    tools = [Tool(n, f"does {n}", {"type": "object", "properties": {n: {"type": "string"}}})
             for n in ("a", "b", "c")]
    agent = subsessions.Profile(name="picky", tools=["c", "nope", "a"])
    config = SessionConfig(tools=tools, custom_agents=(agent,))
    before = (config.tools, agent.tools)
    async with Engine(home, model_client=ScriptedModel([])) as engine:
        session = await engine.create_session(config)
        definitions = session.subsessions.tool_definitions("picky")
        everything = session.subsessions.tool_definitions(subsessions.Profile(name="all"))
    assert definitions == [
        {"name": "c", "description": "does c", "parameters": tools[2].parameters},
        {"name": "a", "description": "does a", "parameters": tools[0].parameters},
    ]
    assert everything == []  # no allowlist: told nothing, it sees the whole list (DESIGN 3.6)
    assert (config.tools, agent.tools) == before


async def test_a_session_running_elsewhere_is_not_resumed_but_can_be_forked(home: Path) -> None:
    import asyncio

    gate: asyncio.Future[list[str]] = asyncio.get_running_loop().create_future()
    asked = asyncio.Event()

    async def slow(request: subsessions.ModelRequest) -> list[str]:
        asked.set()
        return await gate

    async with Engine(home, model_client=ScriptedModel(slow)) as first:
        session = await first.create_session()
        task = asyncio.ensure_future(session.send_and_wait("working"))
        await asked.wait()
        await session.recorder.flush_durable()  # the running task's head is in the file
        async with Engine(home, model_client=ScriptedModel(["forked"])) as second:
            with pytest.raises(subsessions.SessionBusy, match="open in another engine"):
                await second.resume_session(session.session_id)
            fork = await second.fork_session(session.session_id)
            assert await fork.send_and_wait("go on") == "forked"
        gate.set_result(["done"])
        assert await task == "done"


async def test_a_session_another_process_is_writing_is_not_resumed(home: Path) -> None:
    import asyncio
    import sys
    import time

    import orjson

    from subsessions.ids import new_session_id

    writer = await asyncio.create_subprocess_exec(sys.executable, "-c", "import time; "
                                                  "time.sleep(30)")
    try:
        session_id = new_session_id()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(time.time() + 1))
        folder = home / "sessions" / "2026" / "01" / "01"
        folder.mkdir(parents=True)
        lines = [
            {"timestamp": stamp, "type": "session_meta",
             "payload": {"id": session_id, "timestamp": stamp, "source": "exec",
                         "pid": writer.pid, "model": "m", "instructions": ""}},
            {"timestamp": stamp, "type": "turn_context", "payload": {"pid": writer.pid}},
            {"timestamp": stamp, "type": "event_msg", "payload": {"type": "task_started"}},
        ]
        path = folder / f"rollout-2026-01-01T00-00-00-{session_id}.jsonl"
        path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
        async with Engine(home, model_client=ScriptedModel([])) as engine:
            with pytest.raises(subsessions.SessionBusy, match="still running in another process"):
                await engine.resume_session(session_id)
        assert path.read_bytes().count(b"\n") == 3  # nothing was appended
    finally:
        writer.kill()
        await writer.wait()


async def test_flush_and_abort_are_what_applications_call(home: Path) -> None:
    """`flush()` / `flush_durable()` put what a session recorded in its file, `abort()`
    cancels its running task (its children first): no application reaches the recorder or
    the runtime (mcp/ and serve/ use these)."""
    import asyncio

    asked = asyncio.Event()

    async def slow(request: subsessions.ModelRequest) -> list[str]:
        asked.set()
        await asyncio.Event().wait()
        return ["never"]

    async with Engine(home, model_client=ScriptedModel(slow)) as engine:
        session = await engine.create_session()
        assert session.abort() is False  # nothing runs
        task = asyncio.ensure_future(session.send_and_wait("working"))
        await asked.wait()
        session.note("a line of the application's")
        await session.flush_durable()
        lines = _lines(session.rollout_path)
        assert lines[0]["type"] == "session_meta"
        assert lines[-1]["payload"] == {"type": "background_event",
                                        "message": "a line of the application's"}
        assert session.abort() is True
        with pytest.raises(asyncio.CancelledError):
            await task
        session.flush()
        await session.flush_durable()
        assert _lines(session.rollout_path)[-1]["payload"]["type"] == "turn_aborted"


def _lines(path: str) -> list[dict[str, Any]]:
    with open(path, "rb") as file:
        return [orjson.loads(line) for line in file]
