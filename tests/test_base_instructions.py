"""The top-level session of `run` (and `mcp`, `serve`) is told what sub-sessions are, unless
the user gives instructions of their own; children keep their profile's."""

from __future__ import annotations

import re
from pathlib import Path

from fake_openai import FakeOpenAI, Recorded, Reply, call, calls, fake_openai, text
from openai_support import rollouts, run, tool_outputs

from subsessions import SessionConfig
from subsessions.config import SUBSESSION_TOOL_NAMES
from subsessions.engine.instructions import BASE_INSTRUCTIONS, with_base_instructions

__all__ = ["fake_openai"]


def system_of(request: Recorded) -> str:
    [system] = [m["content"] for m in request.body["messages"] if m["role"] == "system"]
    return str(system)


def meta_instructions(home: Path) -> list[str]:
    return [records[0]["payload"]["base_instructions"]["text"]
            for records in rollouts(home).values()]


def test_the_base_text_names_only_tools_that_exist_and_asks_to_wait() -> None:
    named = set(re.findall(r"\b([a-z]+_[a-z_]+)\b", BASE_INSTRUCTIONS)) - {"session_type",
                                                                         "session_id",
                                                                         "timeout_ms"}
    assert named and named <= SUBSESSION_TOOL_NAMES, named - SUBSESSION_TOOL_NAMES
    assert {"create_session", "wait_session"} <= named
    assert "wait for every child" in BASE_INSTRUCTIONS


def test_only_a_session_offered_the_tools_and_given_no_text_gets_it() -> None:
    assert with_base_instructions(SessionConfig()).instructions == BASE_INSTRUCTIONS
    assert with_base_instructions(SessionConfig(instructions="")).instructions == ""
    assert with_base_instructions(SessionConfig(instructions="mine")).instructions == "mine"
    assert with_base_instructions(SessionConfig(max_depth=0)).instructions is None


async def test_run_sends_the_base_text_and_records_it(
    fake_openai: FakeOpenAI, home: Path, tmp_path: Path
) -> None:
    fake_openai.reply_with(text("hello"))
    code, out, err = await run("run", "hi", "--home", str(home), "--base-url",
                               fake_openai.base_url, "--wire-api", "chat", cwd=tmp_path)
    assert (code, out, err) == (0, "hello\n", "")
    assert system_of(fake_openai.requests[0]) == BASE_INSTRUCTIONS
    assert meta_instructions(home) == [BASE_INSTRUCTIONS]


async def test_the_users_instructions_replace_it_and_children_keep_their_profiles(
    fake_openai: FakeOpenAI, home: Path, tmp_path: Path
) -> None:
    def script(request: Recorded) -> Reply:
        if system_of(request) != "Delegate everything.":
            return text("child done")
        done = tool_outputs(request)
        if not done:
            return calls(call("create_session", {"session_type": "default", "prompt": "x"}))
        if len(done) == 1:
            child = done[0].split('"')[3]
            return calls(call("wait_session", {"session_id": child, "timeout_ms": 10_000}))
        return text("parent done")

    fake_openai.script = script
    code, out, err = await run("run", "hi", "--home", str(home), "--base-url",
                               fake_openai.base_url, "--wire-api", "chat",
                               "--instructions", "Delegate everything.", cwd=tmp_path)
    assert (code, out, err) == (0, "parent done\n", "")
    systems = [system_of(r) for r in fake_openai.requests]
    assert BASE_INSTRUCTIONS not in systems
    assert systems.count("Delegate everything.") == 3 and len(systems) == 4
    [child] = [s for s in systems if s != "Delegate everything."]  # the default profile's
    assert child.startswith("You are a sub-session")
    assert sorted(meta_instructions(home)) == sorted(["Delegate everything.", child])
