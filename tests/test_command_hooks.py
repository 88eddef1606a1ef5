"""`config.toml` command hooks (DESIGN 3.13): what `subsessions run`, `batch` and `mcp`
sessions get instead of Python `Hooks`. A real command, JSON on stdin and stdout, as Claude
Code runs its own; what a bad table, a failing command, bad JSON or a hang get."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Recorded, Reply, call, calls, fake_openai, text
from openai_support import run, tool_outputs

from subsessions.engine.command_hooks import hooks_from_settings, run_command
from subsessions.errors import ConfigError
from subsessions.settings import CommandHook, settings_from_mapping

__all__ = ["fake_openai"]

WORKER = 'name = "worker"\ndescription = "works"\ndeveloper_instructions = "You are a worker."\n'
# A SubagentStop hook that blocks once (a state file beside it), and logs what it was given.
STOP = """
import json, pathlib, sys
data = json.load(sys.stdin)
here = pathlib.Path(sys.argv[1])
with open(here / "seen.jsonl", "a") as seen:
    seen.write(json.dumps(data) + "\\n")
if not (here / "blocked").exists():
    (here / "blocked").touch()
    print(json.dumps({"decision": "block", "reason": "Say it twice."}))
"""
START = """
import json, sys
data = json.load(sys.stdin)
print(json.dumps({"additional_context": "Context from " + data["hook_event_name"]}))
"""


def _script(request: Recorded) -> Reply:
    if "You are a worker." in json.dumps(request.body):
        return text(f"worker turn {len(tool_outputs(request)) + 1}")
    done = tool_outputs(request)
    if not done:
        return calls(call("create_session", {"session_type": "worker", "prompt": "go",
                                             "budget": None}))
    if len(done) == 1:
        child = json.loads(done[0])["session_id"]
        return calls(call("wait_session", {"session_id": child, "timeout_ms": 20_000}))
    return text("parent: " + json.loads(done[1])["result"])


async def test_subsessions_run_runs_the_configs_child_hooks(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    (home / "profiles").mkdir(parents=True)
    (home / "profiles" / "worker.toml").write_text(WORKER)
    (tmp_path / "stop.py").write_text(STOP)
    (tmp_path / "start.py").write_text(START)
    python = sys.executable
    (home / "config.toml").write_text(
        f'[[hooks.SubagentStop]]\ncommand = "{python} {tmp_path}/stop.py {tmp_path}"\n'
        f'[[hooks.SubagentStart]]\ncommand = "{python} {tmp_path}/start.py"\ntimeout = 20\n')
    fake_openai.script = _script
    code, out, err = await run("run", "--home", str(home), "--base-url", fake_openai.base_url,
                               "delegate", cwd=tmp_path)
    assert (code, out) == (0, "parent: worker turn 1\n"), err
    worker = [r for r in fake_openai.requests if "You are a worker." in json.dumps(r.body)]
    assert len(worker) == 2  # blocked once: one more turn
    said = json.dumps(worker[0].body)
    assert "Context from SubagentStart" in said
    assert "Say it twice." in json.dumps(worker[1].body)
    seen = [json.loads(line) for line in (tmp_path / "seen.jsonl").read_text().splitlines()]
    assert [s["stop_hook_active"] for s in seen] == [False, True]
    assert seen[0]["hook_event_name"] == "SubagentStop"
    assert seen[0]["last_assistant_message"] == "worker turn 1"


@pytest.mark.parametrize(("table", "problem"), [
    ({"SubagentEnd": [{"command": "x"}]}, "hooks.SubagentEnd: unknown event"),
    ({"SubagentStop": {"command": "x"}}, "hooks.SubagentStop: must be an array of tables"),
    ({"SubagentStop": [{"command": ""}]}, "hooks.SubagentStop.command: must be a non-empty"),
    ({"SubagentStop": [{"command": 5}]}, "hooks.SubagentStop.command: must be a non-empty"),
    ({"SubagentStop": [{"command": "x", "timeout": 0}]}, "hooks.SubagentStop.timeout: must"),
    ({"SubagentStop": [{"command": "x", "timeout": True}]}, "hooks.SubagentStop.timeout"),
    ({"SubagentStop": [{"command": "x", "matcher": "y"}]}, "hooks.SubagentStop.matcher: unk"),
])
def test_a_bad_hooks_table_is_one_config_error(table: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as refused:
        settings_from_mapping({"hooks": table}, "config.toml")
    assert problem in str(refused.value) and "\n" not in str(refused.value)


def test_no_command_hooks_give_no_hooks() -> None:
    assert hooks_from_settings(()) is None
    assert settings_from_mapping({}, "x").command_hooks == ()


@pytest.mark.parametrize(("command", "warning"), [
    ("exit 2", "exited 2; allowed"),
    ("echo not json", "did not answer JSON; allowed"),
    ("echo '[1, 2]'", None),  # not an object: allows, quietly
    ("true", None),  # no answer: allows
])
async def test_a_command_that_fails_or_says_nothing_useful_allows(
    command: str, warning: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="subsessions"):
        answer = await run_command(CommandHook("SubagentStop", command), {"session_id": "s"})
    assert answer is None
    assert (warning in caplog.text) if warning else "allowed" not in caplog.text


async def test_a_command_that_hangs_is_killed_with_what_it_started(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    marker = tmp_path / "pid"
    hook = CommandHook("SubagentStop", f"sleep 300 & echo $! > {marker}; wait", timeout=0.5)
    with caplog.at_level(logging.WARNING, logger="subsessions"):
        assert await run_command(hook, {"session_id": "s"}) is None
    assert "took over 0.5s; allowed" in caplog.text
    assert _state_of(marker) in ("gone", "Z", "X")  # the sleep it started went with it


def _state_of(marker: Path) -> str:
    """The state of the process whose pid `marker` holds: gone, or dead and not yet reaped
    by init (Z), or anything else (alive)."""
    try:
        stat = Path(f"/proc/{int(marker.read_text())}/stat").read_text()
    except FileNotFoundError:
        return "gone"
    return stat.rpartition(")")[2].split()[0]
