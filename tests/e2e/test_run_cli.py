"""`subsessions run PROMPT` as a user runs it: a real process against a loopback server.

The command runs as a subprocess (`python -m subsessions run ...`) started with
`asyncio.create_subprocess_exec`, so the in-process fake server keeps serving while
the test awaits it. Checked: stdout, exit code, stderr, and the rollout files.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI, Recorded, Reply, call, calls, error, fake_openai, text
from openai_support import TIMEOUT, UNSET, cli_env, rollouts, run, start, tool_outputs

from subsessions.rollouts.summary import spawn_of
from subsessions.testing import plain_ending

__all__ = ["fake_openai"]  # the fixture, imported so that pytest finds it here

WORKER_INSTRUCTIONS = "You are a worker sub-session."
WORKER_PROFILE = f'''name = "worker"
description = "does one job"
developer_instructions = "{WORKER_INSTRUCTIONS}"
'''


# -- helpers ------------------------------------------------------------------------------
def make_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / "profiles").mkdir(parents=True)
    (home / "profiles" / "worker.toml").write_text(WORKER_PROFILE, encoding="utf-8")
    return home


def run_args(home: Path, base_url: str, prompt: str, *extra: str) -> list[str]:
    return ["run", "--home", str(home), "--base-url", base_url, *extra, prompt]


def last_event(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The last event, plain; a failure as its `error` (before Codex's `task_complete`)."""
    found = [r["payload"] for r in records if r["type"] == "event_msg"]
    if found[-1]["type"] == "task_complete" and "error" in found[-1]:
        found = found[:-1]
    return plain_ending(found[-1])


def is_worker(request: Recorded) -> bool:
    if request.api == "responses":
        return WORKER_INSTRUCTIONS in str(request.body.get("instructions") or "")
    return any(
        m["role"] == "system" and WORKER_INSTRUCTIONS in str(m["content"])
        for m in request.body["messages"]
    )


def assert_one_line_error(code: int, err: str) -> str:
    assert code != 0
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# -- runs that work -------------------------------------------------------------------------
@pytest.mark.parametrize("wire_api", ["chat", "responses"])
async def test_run_delegates_to_a_child_and_prints_the_final_message(
    fake_openai: FakeOpenAI, tmp_path: Path, wire_api: str
) -> None:
    def script(request: Recorded) -> Reply:
        assert request.api == wire_api
        if is_worker(request):
            return text("42, computed by the worker", pieces=3)
        done = tool_outputs(request)
        if not done:
            return calls(call("create_session", {"session_type": "worker", "prompt": "6 * 7?"}))
        if len(done) == 1:
            child_id = json.loads(done[0])["session_id"]
            return calls(call("wait_session", {"session_id": child_id, "timeout_ms": 20_000}))
        return text("The answer is " + json.loads(done[1])["result"], pieces=2)

    fake_openai.script = script
    home = make_home(tmp_path)

    code, out, err = await run(
        *run_args(home, fake_openai.base_url, "What is 6 * 7?", "--wire-api", wire_api,
                  "--model", "m"),
        cwd=tmp_path,
    )

    assert code == 0, err
    assert out == "The answer is 42, computed by the worker\n"
    assert "Traceback" not in err
    assert {r.body["model"] for r in fake_openai.requests} == {"m"}
    found = rollouts(home)
    assert len(found) == 2
    [parent] = [r for r in found.values() if r[0]["payload"]["source"] == "cli"]
    [child] = [r for r in found.values() if r is not parent]
    parent_id = parent[0]["payload"]["id"]
    spawn = spawn_of(child[0]["payload"])
    assert spawn["parent"] == parent_id
    assert spawn["depth"] == 1
    assert child[0]["payload"]["session_type"] == "worker"
    assert child[0]["payload"]["model"] == "m"
    assert last_event(child) == {
        "type": "task_complete",
        "last_agent_message": "42, computed by the worker",
    }
    assert last_event(parent) == {
        "type": "task_complete",
        "last_agent_message": "The answer is 42, computed by the worker",
    }
    for records in found.values():
        assert any(
            r["type"] == "event_msg" and r["payload"]["type"] == "token_count" for r in records
        )


async def test_run_reads_config_toml(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    fake_openai.reply_with(text("from the configured provider"))
    home = make_home(tmp_path)
    (home / "config.toml").write_text(
        f'model = "configured-model"\nmodel_provider = "local"\n'
        f'[model_providers.local]\nbase_url = "{fake_openai.base_url}"\nwire_api = "chat"\n'
        f'env_key = "{UNSET}"\n',
        encoding="utf-8",
    )

    code, out, err = await run("run", "--home", str(home), "hello", cwd=tmp_path)

    assert code == 0, err
    assert out == "from the configured provider\n"
    [request] = fake_openai.requests
    assert request.api == "chat"
    assert request.body["model"] == "configured-model"


# -- user mistakes: one line on stderr, no traceback ------------------------------------------
@pytest.mark.parametrize(
    ("extra", "named"),
    [
        pytest.param(["--max-depth", "-1"], "--max-depth", id="negative-depth"),
        pytest.param(["--max-children", "-2"], "--max-children", id="negative-children"),
        pytest.param(["--wire-api", "grpc"], "--wire-api", id="unknown-wire-api"),
        pytest.param(["--max-depth", "two"], "--max-depth", id="depth-not-a-number"),
    ],
)
async def test_a_bad_flag_value_is_one_line_on_stderr(
    fake_openai: FakeOpenAI, tmp_path: Path, extra: list[str], named: str
) -> None:
    home = make_home(tmp_path)

    code, out, err = await run(*run_args(home, fake_openai.base_url, "hi", *extra), cwd=tmp_path)

    assert named in assert_one_line_error(code, err)
    assert out == ""
    assert fake_openai.requests == []


async def test_a_bad_base_url_is_one_line_on_stderr(tmp_path: Path) -> None:
    home = make_home(tmp_path)

    code, out, err = await run(*run_args(home, "localhost:8000/v1", "hi"), cwd=tmp_path)
    assert out == ""

    line = assert_one_line_error(code, err)
    assert "--base-url" in line
    assert "localhost:8000/v1" in line


async def test_a_bad_config_file_is_one_line_naming_it(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    (home / "config.toml").write_text("[agents]\nmax_depth = -1\n", encoding="utf-8")

    code, out, err = await run("run", "--home", str(home), "hi", cwd=tmp_path)
    assert out == ""

    line = assert_one_line_error(code, err)
    assert str(home / "config.toml") in line
    assert "agents.max_depth" in line


async def test_missing_api_key_says_which_variable_to_set(tmp_path: Path) -> None:
    home = make_home(tmp_path)

    code, out, err = await run(
        *run_args(home, "https://api.example.invalid/v1", "hi", "--api-key-env", UNSET),
        cwd=tmp_path,
    )

    line = assert_one_line_error(code, err)
    assert UNSET in line
    assert out == ""
    assert rollouts(home) == {}  # failed at start: no session was begun


async def test_a_loopback_url_runs_without_any_key(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    fake_openai.reply_with(text("no key needed"))
    home = make_home(tmp_path)

    code, out, err = await run(
        *run_args(home, fake_openai.base_url, "hi", "--wire-api", "chat", "--api-key-env", UNSET),
        cwd=tmp_path,
    )

    assert code == 0, err
    assert out == "no key needed\n"


async def test_the_key_is_sent_from_the_named_variable(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.reply_with(text("ok"))
    home = make_home(tmp_path)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "subsessions",
        *run_args(home, fake_openai.base_url, "hi", "--api-key-env", "MY_LOCAL_KEY"),
        cwd=tmp_path,
        env={**cli_env(), "MY_LOCAL_KEY": "sk-local-123"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)

    assert proc.returncode == 0, err.decode()
    assert out.decode() == "ok\n"
    assert fake_openai.requests[0].headers["authorization"] == "Bearer sk-local-123"


async def test_a_model_error_is_one_line_and_the_rollout_records_it(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    fake_openai.reply_with(error(401, "Incorrect API key provided: sk-bad."))
    home = make_home(tmp_path)

    code, out, err = await run(
        *run_args(home, fake_openai.base_url, "hi", "--wire-api", "chat"), cwd=tmp_path
    )

    line = assert_one_line_error(code, err)
    assert "401" in line
    assert "Incorrect API key" in line
    assert out == ""
    assert len(fake_openai.requests) == 1  # a 401 is not retried
    [parent] = rollouts(home).values()
    final = last_event(parent)
    assert final["type"] == "error"
    assert "401" in final["message"]


# -- Ctrl-C ---------------------------------------------------------------------------------
async def test_ctrl_c_aborts_parent_and_child_and_exits_130(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    child_streaming = asyncio.Event()
    parent_waiting = asyncio.Event()

    def script(request: Recorded) -> Reply:
        if is_worker(request):
            child_streaming.set()
            return text("this answer never ends", pieces=6).stall_after(2)
        done = tool_outputs(request)
        if not done:
            return calls(call("create_session", {"session_type": "worker", "prompt": "slow"}))
        child_id = json.loads(done[0])["session_id"]
        parent_waiting.set()
        return calls(call("wait_session", {"session_id": child_id, "timeout_ms": 3_600_000}))

    fake_openai.script = script
    home = make_home(tmp_path)
    proc = await start(
        *run_args(home, fake_openai.base_url, "delegate something slow", "--wire-api", "chat"),
        cwd=tmp_path,
    )
    try:
        async with asyncio.timeout(TIMEOUT):
            await child_streaming.wait()
            await parent_waiting.wait()
        proc.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()

    assert proc.returncode == 130, err.decode()
    assert "Traceback" not in err.decode()
    await fake_openai.wait_for_disconnects(1)  # the child's stream was closed
    found = rollouts(home)
    assert len(found) == 2
    for records in found.values():
        assert last_event(records)["type"] == "turn_aborted", records[-1]


# -- SIGTERM --------------------------------------------------------------------------------
def alive(pid: int) -> bool:
    """The process exists and is not a zombie (a container's init may never reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def written_pid(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except FileNotFoundError:
        return None


async def pid_in(path: Path) -> int:
    """The pid a tool command wrote to `path` (renamed into place by another process)."""
    async with asyncio.timeout(TIMEOUT):
        while (pid := written_pid(path)) is None:  # noqa: ASYNC110 (a file, no event)
            await asyncio.sleep(0.02)
    return pid


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP], ids=["TERM", "HUP"])
async def test_sigterm_kills_the_tool_processes_writes_the_endings_and_exits_143(
    fake_openai: FakeOpenAI, tmp_path: Path, stop: signal.Signals
) -> None:
    """An unsandboxed command (danger-full-access) must not outlive a run ended by SIGTERM
    or SIGHUP (its terminal closed): 128 + the signal, like a shell's exit status."""
    pidfile = tmp_path / "sleep.pid"
    script_text = f"echo $$ > {pidfile}.tmp && mv {pidfile}.tmp {pidfile} && exec sleep 600"
    parent_waiting = asyncio.Event()

    def script(request: Recorded) -> Reply:
        if is_worker(request):
            return calls(call("shell", {"command": ["sh", "-c", script_text],
                                        "timeout_ms": 3_600_000}))
        done = tool_outputs(request)
        if not done:
            return calls(call("create_session", {"session_type": "worker", "prompt": "sleep"}))
        parent_waiting.set()
        child_id = json.loads(done[0])["session_id"]
        return calls(call("wait_session", {"session_id": child_id, "timeout_ms": 3_600_000}))

    fake_openai.script = script
    home = make_home(tmp_path)
    proc = await start(
        *run_args(home, fake_openai.base_url, "sleep in a child", "--wire-api", "chat",
                  "--sandbox", "danger-full-access"),
        cwd=tmp_path,
    )
    sleeper = 0
    try:
        sleeper = await pid_in(pidfile)
        async with asyncio.timeout(TIMEOUT):
            await parent_waiting.wait()
        assert alive(sleeper)
        proc.send_signal(stop)
        _, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        if sleeper and alive(sleeper):
            os.kill(sleeper, signal.SIGKILL)
            pytest.fail(f"the tool's sleep (pid {sleeper}) outlived `subsessions run`")

    assert proc.returncode == 128 + stop, err.decode()
    assert "Traceback" not in err.decode()
    found = rollouts(home)
    assert len(found) == 2
    for records in found.values():
        assert last_event(records) == {"type": "turn_aborted", "reason": "cancelled"}
