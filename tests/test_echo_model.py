"""The offline model (`--model-provider echo`): every command that talks to a model can be
tried without a key or a server. Through the CLI as a subprocess, `config.toml`, and the
official `mcp` client driving `subsessions mcp`; a provider that does not exist is one line.
(The docs' own shell blocks on it run in tests/test_docs_examples.py.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from openai_support import cli_env, rollouts, run

from subsessions.models.scripted import EchoModel
from subsessions.settings import load_settings, with_overrides


async def test_run_answers_with_the_prompt_and_writes_a_rollout(
    home: Path, tmp_path: Path
) -> None:
    code, out, err = await run("run", "--model-provider", "echo", "Say hello",
                               "--home", str(home), cwd=tmp_path)
    assert (code, out, err) == (0, "echo: Say hello\n", "")
    [records] = rollouts(home).values()
    assert records[0]["payload"]["model_provider"] == "echo"
    [ending] = [r["payload"] for r in records if r["payload"].get("type") == "task_complete"]
    assert ending["last_agent_message"] == "echo: Say hello"


def _write_config(home: Path, text: str) -> None:
    home.mkdir(mode=0o700, exist_ok=True)
    (home / "config.toml").write_text(text)


async def test_config_toml_can_name_it_and_a_missing_provider_is_one_line(
    home: Path, tmp_path: Path
) -> None:
    _write_config(home, 'model_provider = "echo"\n')
    code, out, err = await run("run", "again", "--home", str(home), cwd=tmp_path)
    assert (code, out, err) == (0, "echo: again\n", "")
    code, out, err = await run("run", "--model-provider", "nope", "x", "--home", str(home),
                               cwd=tmp_path)
    assert (code, out) == (1, "")
    assert err == ("subsessions: command line: --model-provider: 'nope' is not a provider "
                   "here; have: anthropic, echo, llamacpp, ollama, openai, vllm\n")


async def test_mcp_run_session_on_the_offline_model(home: Path, tmp_path: Path) -> None:
    pytest.importorskip("mcp", reason="pip install 'subsessions[mcp]'")
    from mcp import Client, StdioServerParameters

    server = StdioServerParameters(
        command=sys.executable, args=["-m", "subsessions", "mcp", "--home", str(home),
                                      "--model-provider", "echo"],
        cwd=str(tmp_path), env=cli_env())
    async with Client(server) as client:
        done = await client.call_tool("run_session", {"session_type": "default",
                                                      "prompt": "count to three"})
        listed = await client.call_tool("list_sessions", {})
    assert not done.is_error
    assert [c.text for c in done.content] == ["echo: count to three"]
    sessions = json.loads(listed.content[0].text)["sessions"]
    assert [s["status"] for s in sessions] == ["completed"]


async def test_a_profile_may_route_one_child_to_it(tmp_path: Path) -> None:
    """`echo:NAME` is a model on the echo provider, from any engine's provider (a profile's
    `model = "echo:x"` keeps one child offline)."""
    from subsessions.models.factory import build_model_client

    settings = with_overrides(load_settings(tmp_path / "home"), model_provider="ollama")
    routes = build_model_client(settings)
    try:
        client, bare = routes.route("echo:anything")
        assert isinstance(client, EchoModel) and bare == "anything"
    finally:
        await routes.aclose()
