"""The sandbox holds as root and as a normal user; commands never see the engine's secrets;
a fork bomb is bounded (issue 11, items 1, 3 and 10). Real bwrap, real processes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from tools_support import needs_bwrap, ws

from subsessions import Engine, ScriptedModel, SessionConfig
from subsessions.config import Invocation
from subsessions.environment import EnvPolicy, env_policy_from_table
from subsessions.errors import ConfigError
from subsessions.settings import settings_from_mapping
from subsessions.tools import ToolContext, builtin_tools, limits, sandbox

__all__ = ["ws"]

CALL = Invocation(session_id="s", tool_call_id="call_1", tool_name="shell")
SANDBOXED = ["read-only", "workspace-write"]
SECRET = "sk-test-" + uuid.uuid4().hex


async def run(context: ToolContext, command: list[str], **more: Any) -> dict[str, Any]:
    (tool,) = builtin_tools(context, ["shell"])
    assert tool.handler is not None
    value: dict[str, Any] = orjson.loads(await tool.handler({"command": command, **more}, CALL))
    return value


def read_text(path: str) -> str:
    return Path(path).read_text()


# -- item 1: no capabilities, no remount, as root and as a normal user ----------------------
@needs_bwrap
@pytest.mark.parametrize("mode", SANDBOXED)
async def test_a_sandboxed_command_holds_no_capability(ws: Path, mode: str) -> None:
    result = await run(ToolContext(cwd=str(ws), sandbox=mode),
                       ["grep", "-E", "^Cap(Eff|Prm|Amb)", "/proc/self/status"])
    lines = result["output"].split("\n")
    assert [line.split()[1] for line in lines if line] == ["0000000000000000"] * 3, result


@needs_bwrap
@pytest.mark.parametrize("mode", SANDBOXED)
async def test_remounting_the_root_writable_fails(ws: Path, mode: str) -> None:
    target = Path("/etc") / f"pwned-{uuid.uuid4().hex}"
    script = f"mount -o remount,bind,rw / && touch {target}"
    result = await run(ToolContext(cwd=str(ws), sandbox=mode), ["sh", "-c", script])
    assert result["metadata"]["exit_code"] != 0
    assert not target.exists()


@needs_bwrap
@pytest.mark.parametrize("mode", SANDBOXED)
def test_a_normal_user_gets_the_same_sandbox(mode: str) -> None:
    """The command line the tool builds, run by uid 65534: no capabilities, and nothing
    written outside the workspace (which it may write under workspace-write)."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to become a normal user")
    with tempfile.TemporaryDirectory() as top:
        os.chmod(top, 0o755)
        workspace = Path(top) / "ws"
        workspace.mkdir()
        os.chown(workspace, 65534, 65534)
        outside = Path(top) / "outside.txt"
        script = f"grep ^CapEff /proc/self/status; touch {outside}; touch ok && echo wrote"
        read, write = os.pipe()
        try:
            context = ToolContext(cwd=str(workspace), sandbox=mode)
            argv = sandbox.bwrap_argv(context, ["sh", "-c", script], str(workspace), write)
            done = subprocess.run(
                [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", *argv],
                capture_output=True, text=True, timeout=60, cwd=workspace, pass_fds=(write,),
            )
        finally:
            os.close(read)
            os.close(write)
        assert done.stdout.split("\n")[0].split() == ["CapEff:", "0000000000000000"], done
        assert not outside.exists()
        assert (workspace / "ok").exists() is (mode == "workspace-write"), done


@needs_bwrap
@pytest.mark.parametrize("mode", SANDBOXED)
async def test_no_nested_user_namespace_gives_capabilities_back(ws: Path, mode: str) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("util-linux unshare is not installed")
    if not sandbox._knows_disable_userns(sandbox.find_bwrap()):
        pytest.skip("this bwrap (before 0.8) has no --disable-userns")
    result = await run(ToolContext(cwd=str(ws), sandbox=mode),
                       ["sh", "-c", "unshare --user true && echo nested"])
    assert "nested" not in result["output"], result


# -- item 3: the engine's secrets never reach a command ------------------------------------------
@pytest.mark.parametrize("mode", ["danger-full-access", pytest.param("workspace-write",
                                                                     marks=needs_bwrap)])
async def test_commands_do_not_see_keys_secrets_or_tokens(
    ws: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("MY_SECRET_VALUE", SECRET)
    monkeypatch.setenv("github_token", SECRET)
    monkeypatch.setenv("SUBSESSIONS_TEST_PLAIN", "visible")
    result = await run(ToolContext(cwd=str(ws), sandbox=mode), ["env"])
    assert SECRET not in result["output"]
    assert "SUBSESSIONS_TEST_PLAIN=visible" in result["output"]
    assert "PATH=" in result["output"]


async def test_a_key_never_lands_in_the_rollout(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    script = [[{"type": "function_call", "name": "shell",
                "arguments": {"command": ["printenv", "OPENAI_API_KEY"]}}], ["done"]]
    async with Engine(home, model_client=ScriptedModel(script)) as engine:
        session = await engine.create_session(SessionConfig(
            builtin_tools=("shell",), sandbox="danger-full-access", cwd=str(tmp_path)))
        assert await session.send_and_wait("print the key") == "done"
        path = session.recorder.path
    text = read_text(path)
    assert SECRET not in text
    assert '\\"exit_code\\":1' in text  # printenv found no such variable


def test_the_policy_follows_codex_order() -> None:
    environ = {"PATH": "/bin", "HOME": "/root", "AWS_SECRET": "s", "Api_Key": "k",
               "NPM_TOKEN": "t", "LANG": "C", "KEEP_ME": "1", "DROP_ME": "2"}
    assert EnvPolicy().apply(environ) == {"PATH": "/bin", "HOME": "/root", "LANG": "C",
                                          "KEEP_ME": "1", "DROP_ME": "2"}
    assert EnvPolicy(inherit="core").apply(environ) == {"PATH": "/bin", "HOME": "/root"}
    assert EnvPolicy(inherit="none", set={"X": "1"}).apply(environ) == {"X": "1"}
    assert EnvPolicy(exclude=("drop_*",), set={"NPM_TOKEN": "mine"}).apply(environ) == {
        "PATH": "/bin", "HOME": "/root", "LANG": "C", "KEEP_ME": "1", "NPM_TOKEN": "mine"}
    assert "Api_Key" in EnvPolicy(ignore_default_excludes=True).apply(environ)
    assert EnvPolicy(include_only=("PATH", "KEEP_*")).apply(environ) == {
        "PATH": "/bin", "KEEP_ME": "1"}


def test_config_toml_sets_the_policy_and_bad_tables_are_one_clear_line() -> None:
    table = {"inherit": "core", "exclude": ["FOO*"], "set": {"CI": "1"},
             "include_only": [], "ignore_default_excludes": False}
    settings = settings_from_mapping({"shell_environment_policy": table}, "config.toml")
    assert settings.env_policy == EnvPolicy(inherit="core", exclude=("FOO*",), set={"CI": "1"})
    for bad, where in [
        ({"inherit": "some"}, "shell_environment_policy.inherit"),
        ({"exclude": "KEY"}, "shell_environment_policy.exclude"),
        ({"set": {"A": 1}}, "shell_environment_policy.set"),
        ({"ignore_default_excludes": "yes"}, "shell_environment_policy.ignore_default_excludes"),
        ({"nope": 1}, "shell_environment_policy.nope"),
        ("all", "shell_environment_policy"),
    ]:
        with pytest.raises(ConfigError, match=where.replace(".", r"\.")):
            env_policy_from_table(bad, "config.toml")


# -- item 10: a bounded number of processes per command ---------------------------------------
STORM = """
import os, time
started = 0
for _ in range(300):  # bounded: 300 at most
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    started += 1
print(started)
"""


@needs_bwrap
async def test_a_fork_storm_is_bounded(ws: Path) -> None:
    context = ToolContext(cwd=str(ws), sandbox="workspace-write", max_processes=64)
    result = await run(context, [sys.executable, "-c", STORM], timeout_ms=30_000)
    assert int(result["output"]) < 64, result  # the namespace's first processes count too
    unbounded = ToolContext(cwd=str(ws), sandbox="workspace-write", max_processes=1000)
    result = await run(unbounded, [sys.executable, "-c", STORM], timeout_ms=30_000)
    assert int(result["output"]) == 300, result  # the bound is what stopped the first


@needs_bwrap
def test_the_cgroups_of_a_killed_engine_are_removed_by_the_next(tmp_path: Path) -> None:
    root = limits.pids_root()
    if root is None:
        pytest.skip("no writable pids cgroup here (not root, or none mounted)")
    program = (
        "import asyncio, os, sys\n"
        "from subsessions.config import Invocation\n"
        "from subsessions.tools import ToolContext, builtin_tools\n"
        "(tool,) = builtin_tools(ToolContext(cwd=sys.argv[1]), ['shell'])\n"
        "asyncio.run(tool.handler({'command': ['true']}, Invocation('s', 'c', 'shell')))\n"
        "if sys.argv[2] == 'kill':\n"
        "    os.kill(os.getpid(), 9)\n"
    )
    killed = subprocess.Popen([sys.executable, "-c", program, str(tmp_path), "kill"])
    assert killed.wait(timeout=60) == -9
    left = list((root / "subsessions").glob(f"{killed.pid}-*"))
    assert left, "the killed engine could not remove its cgroup"
    subprocess.run([sys.executable, "-c", program, str(tmp_path), "end"], timeout=60,
                   check=True)
    assert not [folder for folder in left if folder.exists()]


def test_what_escaped_the_process_group_dies_with_its_commands_cgroup() -> None:
    """A process of the command that left its process group (as bwrap's namespace init
    does with --new-session) and missed --die-with-parent (bwrap killed before it set it)
    is killed when the command's cgroup is given back."""
    root = limits.pids_root()
    if root is None:
        pytest.skip("no writable pids cgroup here (not root, or none mounted)")
    with limits.process_cgroup(64) as procs:
        assert procs is not None  # a session of its own: no process group of ours holds it
        orphan = subprocess.Popen(limits.limited(["sleep", "300"], procs),
                                  start_new_session=True)
        try:
            for _ in range(1000):  # until it is in the cgroup (it enters, then execs)
                if str(orphan.pid) in procs.read_text().split():
                    break
                time.sleep(0.005)
            assert str(orphan.pid) in procs.read_text().split()
        except BaseException:
            orphan.kill()
            raise
    try:
        assert orphan.wait(timeout=10) == -signal.SIGKILL
    finally:
        orphan.kill()
        orphan.wait()


# -- no set-user-id files, no file capabilities (a root engine's files are root's) ----------
SETUID_ATTEMPTS = {
    "chmod u+s": "cp /bin/true ./planted && chmod u+s ./planted",
    "chmod g+s numeric": "cp /bin/true ./planted && chmod 2755 ./planted",
    "python os.chmod": (
        "cp /bin/true ./planted && python3 -c \"import os; os.chmod('planted', 0o4755)\""),
    "created set-uid by open": (
        "python3 -c \"import os; os.close(os.open('planted', os.O_CREAT | os.O_WRONLY, 0o4755))\""
    ),
    "mknod set-uid": "python3 -c \"import os, stat; os.mknod('planted', stat.S_IFREG | 0o6755)\"",
    "install -m": "install -m 4755 /bin/true ./planted",
}


@needs_bwrap
@pytest.mark.parametrize("how", SETUID_ATTEMPTS)
async def test_no_set_user_id_file_can_be_made(ws: Path, how: str) -> None:
    """As root a set-uid file made in a writable root would be root's, outside the sandbox:
    any local user running it would be root. The mode change fails, whatever the call."""
    result = await run(ToolContext(cwd=str(ws), sandbox="workspace-write"),
                       ["sh", "-c", SETUID_ATTEMPTS[how]])
    planted = ws / "planted"
    if planted.exists():
        assert not planted.stat().st_mode & 0o6000, (how, oct(planted.stat().st_mode), result)
    assert result["metadata"]["exit_code"] != 0 or not planted.exists(), result


@needs_bwrap
async def test_no_file_capability_can_be_set(ws: Path) -> None:
    script = ("cp /bin/true ./planted && python3 -c \"import os; "
              "os.setxattr('planted', 'security.capability', "
              "bytes.fromhex('0100000201000000000000000000000000000000'))\"")
    result = await run(ToolContext(cwd=str(ws), sandbox="workspace-write"), ["sh", "-c", script])
    assert result["metadata"]["exit_code"] != 0
    assert "security.capability" not in os.listxattr(ws / "planted")


@needs_bwrap
async def test_ordinary_modes_and_files_still_work(ws: Path) -> None:
    script = ("cp /bin/true ./tool && chmod 755 ./tool && ./tool && mkdir -p d && chmod 700 d "
              "&& printf hi > d/f && chmod 600 d/f && cat d/f")
    result = await run(ToolContext(cwd=str(ws), sandbox="workspace-write"), ["sh", "-c", script])
    assert (result["metadata"]["exit_code"], result["output"]) == (0, "hi"), result
    assert (ws / "tool").stat().st_mode & 0o777 == 0o755


# -- the engine's home stays read-only when it lies inside a writable root -----------------
@needs_bwrap
async def test_a_home_inside_the_workspace_cannot_be_written_by_tools(tmp_path: Path) -> None:
    """A home in the workspace (or /tmp): a command that wrote its config.toml would name an
    MCP server the next run starts unsandboxed. Shell and apply_patch both refuse."""
    workspace = tmp_path / "ws"
    home = workspace / ".subsessions-home"
    workspace.mkdir()
    script = ScriptedModel([[{"type": "function_call", "name": "shell", "arguments": {
        "command": ["sh", "-c", "echo '[mcp_servers.x]' >> .subsessions-home/config.toml; "
                    "touch .subsessions-home/planted; touch ok"]}}], [
        {"type": "function_call", "name": "apply_patch", "arguments": {"patch": (
            "*** Begin Patch\n*** Add File: .subsessions-home/config.toml\n+[mcp_servers.y]\n"
            "*** End Patch\n")}}], ["done"]])
    async with Engine(home=home, model_client=script) as engine:
        session = await engine.create_session(SessionConfig(
            cwd=str(workspace), builtin_tools=True, approval="never"))
        assert await session.send_and_wait("try") == "done"
    assert (workspace / "ok").exists()  # the workspace itself stays writable
    assert not (home / "config.toml").exists() and not (home / "planted").exists()
    outputs = [item["output"] for item in script.requests[-1].items
               if item.get("type") == "function_call_output"]
    assert "stays read-only in the sandbox" in outputs[-1], outputs
