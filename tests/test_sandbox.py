"""The sandbox: escapes refused under bubblewrap and by the resolved-path checks."""

from __future__ import annotations

import os
import secrets
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from tools_support import BWRAP_WORKS, needs_bwrap, ws

from subsessions.config import Invocation
from subsessions.tools import (
    SandboxUnavailable,
    ToolContext,
    WriteNotAllowed,
    builtin_tools,
    sandbox,
)

__all__ = ["ws"]  # the fixture, imported so that pytest finds it here

CALL = Invocation(session_id="s", tool_call_id="call_1", tool_name="shell")


async def shell(context: ToolContext, *command: str) -> dict[str, Any]:
    (tool,) = builtin_tools(context, ["shell"])
    assert tool.handler is not None
    value: dict[str, Any] = orjson.loads(await tool.handler({"command": list(command)}, CALL))
    return value


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    return path


@pytest.fixture
def etc_target() -> Iterator[Path]:
    path = Path("/etc") / f"subsessions-sandbox-test-{secrets.token_hex(4)}"
    yield path
    path.unlink(missing_ok=True)  # only if the sandbox failed


def exists(path: Path) -> bool:
    return os.path.lexists(path)


def real(path: Path) -> str:
    return os.path.realpath(path)


def strict(ws: Path, **kwargs: Any) -> ToolContext:
    """workspace-write with the temp dirs excluded, so a sibling temp dir is "outside"."""
    return ToolContext(cwd=str(ws), exclude_slash_tmp=True, exclude_tmpdir_env_var=True,
                       **kwargs)


# -- bubblewrap ---------------------------------------------------------------------------


@needs_bwrap
async def test_workspace_is_writable(ws: Path) -> None:
    result = await shell(strict(ws), "bash", "-c", "echo hi > inside.txt && cat inside.txt")
    assert result["output"] == "hi\n"
    assert (ws / "inside.txt").read_text() == "hi\n"


@needs_bwrap
async def test_write_outside_the_workspace_is_refused(ws: Path, outside: Path) -> None:
    target = outside / "escaped.txt"
    result = await shell(strict(ws), "touch", str(target))
    assert result["metadata"]["exit_code"] != 0
    assert "Read-only file system" in result["output"]
    assert not target.exists()


@needs_bwrap
async def test_write_through_a_symlink_is_refused(ws: Path, outside: Path) -> None:
    (ws / "link").symlink_to(outside)
    (ws / "file-link").symlink_to(outside / "target.txt")
    result = await shell(strict(ws), "bash", "-c",
                         "echo x > link/escaped.txt; echo y > file-link; echo done")
    assert result["output"].count("Read-only file system") == 2
    assert os.listdir(outside) == []


@needs_bwrap
async def test_write_with_dot_dot_is_refused(ws: Path, outside: Path) -> None:
    result = await shell(strict(ws), "bash", "-c", "echo x > ../outside/escaped.txt")
    assert result["metadata"]["exit_code"] != 0
    assert not (outside / "escaped.txt").exists()


@needs_bwrap
async def test_write_to_etc_is_refused(ws: Path, etc_target: Path) -> None:
    for context in (ToolContext(cwd=str(ws)), ToolContext(cwd=str(ws), sandbox="read-only")):
        result = await shell(context, "touch", str(etc_target))
        assert "Read-only file system" in result["output"]
        assert not exists(etc_target)


@needs_bwrap
async def test_temp_dirs_are_writable_unless_excluded(ws: Path, outside: Path) -> None:
    # `outside` is under /tmp (pytest's tmp_path): writable by default, as in Codex
    assert real(outside).startswith("/tmp/")
    result = await shell(ToolContext(cwd=str(ws)), "touch", str(outside / "tmp-ok"))
    assert result["metadata"]["exit_code"] == 0
    assert (outside / "tmp-ok").exists()


@needs_bwrap
async def test_extra_writable_roots(ws: Path, outside: Path) -> None:
    context = strict(ws, writable_roots=(str(outside),))
    result = await shell(context, "touch", str(outside / "allowed"))
    assert result["metadata"]["exit_code"] == 0
    assert (outside / "allowed").exists()


@needs_bwrap
async def test_read_only_sandbox_writes_nothing(ws: Path) -> None:
    result = await shell(ToolContext(cwd=str(ws), sandbox="read-only"), "touch", "x")
    assert "Read-only file system" in result["output"]
    assert not (ws / "x").exists()
    result = await shell(ToolContext(cwd=str(ws), sandbox="read-only"), "ls", "/")
    assert result["metadata"]["exit_code"] == 0  # reading works


@needs_bwrap
async def test_git_directory_stays_read_only(ws: Path) -> None:
    (ws / ".git" / "hooks").mkdir(parents=True)
    result = await shell(strict(ws), "bash", "-c",
                         "echo evil > .git/hooks/pre-commit; touch ok; echo end")
    assert "Read-only file system" in result["output"]
    assert not (ws / ".git" / "hooks" / "pre-commit").exists()
    assert (ws / "ok").exists()


@needs_bwrap
async def test_dev_and_proc_are_provided(ws: Path) -> None:
    script = "echo x > /dev/null && head -c 4 /dev/urandom | wc -c && cut -d' ' -f1 /proc/self/stat"
    result = await shell(strict(ws), "bash", "-c", script)
    lines = result["output"].split()
    assert lines[0] == "4"
    assert int(lines[1]) < 10  # its own pid namespace


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    yield server.getsockname()[1]
    server.close()


def connect_script(port: int) -> list[str]:
    return [sys.executable, "-c",
            f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5); "
            "print('connected')"]


@needs_bwrap
async def test_network_is_off_under_workspace_write(ws: Path, listener: int) -> None:
    for context in (ToolContext(cwd=str(ws)), ToolContext(cwd=str(ws), sandbox="read-only"),
                    ToolContext(cwd=str(ws), sandbox="read-only", network_access=True)):
        result = await shell(context, *connect_script(listener))
        assert result["metadata"]["exit_code"] != 0
        assert "connected" not in result["output"]
        assert "Connection refused" in result["output"] or "unreachable" in result["output"]


@needs_bwrap
async def test_network_access_turns_it_on(ws: Path, listener: int) -> None:
    for context in (ToolContext(cwd=str(ws), network_access=True),
                    ToolContext(cwd=str(ws), sandbox="danger-full-access")):
        result = await shell(context, *connect_script(listener))
        assert result["output"] == "connected\n"


@needs_bwrap
async def test_sandbox_environment_variables(ws: Path) -> None:
    result = await shell(ToolContext(cwd=str(ws)), "bash", "-c",
                         "echo $SUBSESSIONS_SANDBOX $SUBSESSIONS_SANDBOX_NETWORK_DISABLED")
    assert result["output"] == "workspace-write 1\n"


# -- the command line ---------------------------------------------------------------------


def test_bwrap_argv(ws: Path, outside: Path) -> None:
    (ws / ".git").mkdir()
    context = strict(ws, writable_roots=(str(outside),))
    if not BWRAP_WORKS:
        pytest.skip("bubblewrap cannot run here")
    argv = sandbox.bwrap_argv(context, ["ls", "-l"], str(ws), 7)
    joined = " ".join(argv)
    assert argv[1:4] == ["--ro-bind", "/", "/"]
    for flag in ("--dev /dev", "--proc /proc", "--unshare-pid", "--die-with-parent",
                 "--unshare-net", f"--chdir {ws}", "--json-status-fd 7"):
        assert flag in joined
    assert f"--bind {ws.resolve()} {ws.resolve()}" in joined
    assert f"--bind {outside.resolve()} {outside.resolve()}" in joined
    assert f"--ro-bind {ws.resolve()}/.git {ws.resolve()}/.git" in joined
    assert argv[-3:] == ["--", "ls", "-l"]
    assert "--unshare-net" not in sandbox.bwrap_argv(
        strict(ws, network_access=True), ["ls"], str(ws), 7
    )
    read_only = sandbox.bwrap_argv(ToolContext(cwd=str(ws), sandbox="read-only"), ["ls"], "/", 7)
    assert "--bind" not in read_only
    assert "--unshare-net" in read_only


def test_bwrap_missing(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "BWRAP_PATH", "/nonexistent/bwrap")
    with pytest.raises(SandboxUnavailable, match=r"bubblewrap \(/nonexistent/bwrap\) was not "
                       "found; the command was refused rather than run outside the sandbox"):
        sandbox.bwrap_argv(ToolContext(cwd=str(ws)), ["ls"], str(ws), 7)


# -- resolved-path checks (the file tools) ------------------------------------------------


def test_writes_inside_the_workspace_are_allowed(ws: Path) -> None:
    context = strict(ws)
    assert sandbox.check_write(context, "a.txt") == str(ws.resolve() / "a.txt")
    assert sandbox.check_write(context, "new/dir/b.txt") == str(ws.resolve() / "new/dir/b.txt")
    assert sandbox.check_write(context, str(ws / "c.txt")) == str(ws.resolve() / "c.txt")
    assert sandbox.check_write(context, "sub/../d.txt") == str(ws.resolve() / "d.txt")


def test_escapes_are_refused(ws: Path, outside: Path) -> None:
    context = strict(ws)
    (ws / "link").symlink_to(outside)
    (ws / "file-link").symlink_to(outside / "f.txt")
    (ws / "sub").mkdir()
    for path in ("../outside/x.txt", "sub/../../outside/x.txt", "link/x.txt", "file-link",
                 str(outside / "x.txt"), "/etc/passwd", "/etc/new-file", "~/.bashrc"):
        with pytest.raises(WriteNotAllowed, match="outside the writable roots"):
            sandbox.check_write(context, path)
    with pytest.raises(WriteNotAllowed, match=r"writing link/x.txt \(.*/outside/x.txt\)"):
        sandbox.check_write(context, "link/x.txt")


def test_a_symlinked_workspace_is_resolved(tmp_path: Path, ws: Path) -> None:
    (tmp_path / "ws-link").symlink_to(ws)
    context = strict(tmp_path / "ws-link")
    assert sandbox.check_write(context, "a.txt") == str(ws.resolve() / "a.txt")


def test_removing_a_symlink_resolves_only_its_directory(ws: Path, outside: Path) -> None:
    context = strict(ws)
    (ws / "file-link").symlink_to(outside / "f.txt")
    assert sandbox.check_write(context, "file-link", removing=True) == str(
        ws.resolve() / "file-link"
    )
    with pytest.raises(WriteNotAllowed):
        sandbox.check_write(context, "file-link")


def test_git_is_protected(ws: Path) -> None:
    (ws / ".git").mkdir()
    with pytest.raises(WriteNotAllowed, match=r"\.git stays read-only"):
        sandbox.check_write(strict(ws), ".git/hooks/pre-commit")
    assert sandbox.check_write(strict(ws), ".gitignore")


def test_read_only_and_full_access(ws: Path) -> None:
    with pytest.raises(WriteNotAllowed, match="the sandbox is read-only"):
        sandbox.check_write(ToolContext(cwd=str(ws), sandbox="read-only"), "a.txt")
    full = ToolContext(cwd=str(ws), sandbox="danger-full-access")
    assert sandbox.check_write(full, "/etc/passwd") == "/etc/passwd"


def test_temp_dirs(ws: Path, outside: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(outside))
    context = ToolContext(cwd=str(ws), exclude_slash_tmp=True)
    assert sandbox.check_write(context, str(outside / "x"))
    with pytest.raises(WriteNotAllowed):
        sandbox.check_write(strict(ws), str(outside / "x"))
    assert "/tmp" in sandbox.writable_roots(ToolContext(cwd=str(ws)))


def test_context_validation(ws: Path) -> None:
    with pytest.raises(ValueError, match="sandbox must be one of: read-only, workspace-write, "
                       "danger-full-access; not 'full'"):
        ToolContext(cwd=str(ws), sandbox="full")
    with pytest.raises(ValueError, match="approval must be one of: untrusted, on-request, never"):
        ToolContext(cwd=str(ws), approval="always")
    with pytest.raises(ValueError, match="output_budget_bytes"):
        ToolContext(cwd=str(ws), output_budget_bytes=0)
    assert ToolContext(cwd=str(ws), writable_roots=["/a", "/b"]).writable_roots == ("/a", "/b")
    assert os.path.isabs(ToolContext(cwd=str(ws)).cwd)
