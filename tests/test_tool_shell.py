"""The `shell` tool: real processes, output bounds, timeouts, cancellation, approvals."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from tools_support import (
    BWRAP_WORKS,
    Recorder,
    assert_gone,
    live_pids,
    marker,
    needs_bwrap,
    wait_for_pids,
    ws,
)

from subsessions.config import Invocation
from subsessions.errors import InvalidArguments
from subsessions.tools import (
    NO_APPROVAL,
    ApprovalDenied,
    CommandNotFound,
    EscalationNotAllowed,
    FileToolError,
    SandboxUnavailable,
    ToolContext,
    builtin_tools,
)
from subsessions.tools import sandbox as sandbox_module
from subsessions.tools import shell as shell_module

__all__ = ["ws"]  # the fixture, imported so that pytest finds it here

MODES = [
    "danger-full-access",
    pytest.param("workspace-write", marks=needs_bwrap),
]
CALL = Invocation(session_id="s", tool_call_id="call_1", tool_name="shell")


async def run(context: ToolContext, **arguments: Any) -> dict[str, Any]:
    (tool,) = builtin_tools(context, ["shell"])
    assert tool.handler is not None
    result = await tool.handler(arguments, CALL)
    value: dict[str, Any] = orjson.loads(result)
    return value


def real(path: Path) -> str:
    return os.path.realpath(path)


# -- running ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_output_exit_code_and_wall_time(ws: Path, mode: str) -> None:
    result = await run(ToolContext(cwd=str(ws), sandbox=mode),
                       command=["bash", "-c", "echo out; echo err >&2; echo more; exit 3"])
    assert result["output"] == "out\nerr\nmore\n"  # one pipe: interleaved as produced
    meta = result["metadata"]
    assert meta["exit_code"] == 3
    assert 0 <= meta["duration_seconds"] < 10
    assert meta["timed_out"] is False
    assert meta["sandbox"] == ("none" if mode == "danger-full-access" else mode)
    assert meta["output_bytes"] == len("out\nerr\nmore\n")
    assert meta["truncated_bytes"] == 0


@pytest.mark.parametrize("mode", MODES)
async def test_no_shell_unless_asked_for(ws: Path, mode: str) -> None:
    result = await run(ToolContext(cwd=str(ws), sandbox=mode), command=["echo", "$HOME", "a;b"])
    assert result["output"] == "$HOME a;b\n"


@pytest.mark.parametrize("mode", MODES)
async def test_workdir_is_relative_to_the_workspace(ws: Path, mode: str) -> None:
    (ws / "sub").mkdir()
    result = await run(ToolContext(cwd=str(ws), sandbox=mode), command=["pwd"], workdir="sub")
    assert result["output"].strip() == str((ws / "sub").resolve())
    with pytest.raises(FileToolError, match="workdir 'missing' is not an existing directory"):
        await run(ToolContext(cwd=str(ws), sandbox=mode), command=["pwd"], workdir="missing")


@pytest.mark.parametrize("mode", MODES)
async def test_a_command_that_does_not_exist(ws: Path, mode: str) -> None:
    context = ToolContext(cwd=str(ws), sandbox=mode)
    with pytest.raises(CommandNotFound, match=r"command not found: 'no-such-command-x' \(not on"):
        await run(context, command=["no-such-command-x", "arg"])
    with pytest.raises(CommandNotFound, match=r"'./nope' \(no such file\)"):
        await run(context, command=["./nope"])
    (ws / "data.txt").write_text("x")
    with pytest.raises(CommandNotFound, match="not an executable file"):
        await run(context, command=["./data.txt"])


async def test_path_lookups_follow_programs_that_come_and_go(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found programs are remembered (a shell's hash), but never past their removal, and a
    program installed after a miss is found."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    program = bin_dir / "hello-subsessions"
    context = ToolContext(cwd=str(ws), sandbox="danger-full-access")
    with pytest.raises(CommandNotFound, match="not on PATH"):
        await run(context, command=["hello-subsessions"])
    program.write_text("#!/bin/sh\necho hello\n")
    program.chmod(0o755)
    assert (await run(context, command=["hello-subsessions"]))["output"] == "hello\n"
    program.chmod(0o644)
    with pytest.raises(CommandNotFound, match="not on PATH"):
        await run(context, command=["hello-subsessions"])
    program.chmod(0o755)
    assert (await run(context, command=["hello-subsessions"]))["output"] == "hello\n"
    program.unlink()
    with pytest.raises(CommandNotFound, match="not on PATH"):
        await run(context, command=["hello-subsessions"])


async def test_a_command_that_does_not_exist_asks_nobody(ws: Path) -> None:
    asked = Recorder()
    context = ToolContext(cwd=str(ws), approval="untrusted", ask_permission=asked)
    with pytest.raises(CommandNotFound):
        await run(context, command=["no-such-command-x"])
    assert asked.requests == []


async def test_malformed_arguments(ws: Path) -> None:
    context = ToolContext(cwd=str(ws), sandbox="danger-full-access")
    cases: list[tuple[dict[str, Any], str]] = [
        ({}, "missing required field command"),
        ({"command": "ls -l"}, "command must be an array, not string"),
        ({"command": []}, "command must be a non-empty array"),
        ({"command": ["ls", 3]}, r"command\[1\] must be a string"),
        ({"command": ["ls", "a\0b"]}, "command must not contain NUL characters"),
        ({"command": ["ls"], "shell": True}, "unexpected field shell"),
        ({"command": ["ls"], "timeout_ms": 0}, "timeout_ms must be positive"),
        ({"command": ["ls"], "timeout_ms": -5}, "timeout_ms must be positive"),
        ({"command": ["ls"], "timeout_ms": "9"}, "timeout_ms must be an integer"),
    ]
    for arguments, message in cases:
        with pytest.raises(InvalidArguments, match="invalid arguments for shell: " + message):
            await run(context, **arguments)
    # null for an optional field (what strict-mode models send) means "not given"
    result = await run(context, command=["true"], workdir=None, timeout_ms=None)
    assert result["metadata"]["exit_code"] == 0


async def test_a_huge_timeout_is_clamped(ws: Path) -> None:
    context = ToolContext(cwd=str(ws), sandbox="danger-full-access")
    result = await run(context, command=["true"], timeout_ms=10**15)
    assert result["metadata"]["exit_code"] == 0


async def test_killed_by_a_signal(ws: Path) -> None:
    result = await run(ToolContext(cwd=str(ws), sandbox="danger-full-access"),
                       command=["bash", "-c", "kill -9 $$"])
    assert result["metadata"]["exit_code"] == 128 + signal.SIGKILL
    assert "[killed by signal SIGKILL]" in result["output"]


# -- output bounds ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_huge_output_keeps_head_and_tail(ws: Path, mode: str) -> None:
    script = "import sys; w = sys.stdout.write; w('BEGIN'); w('x' * 20_000_000); w('END')"
    context = ToolContext(cwd=str(ws), sandbox=mode, output_budget_bytes=4096)
    started = time.monotonic()
    result = await run(context, command=[sys.executable, "-c", script])
    assert time.monotonic() - started < 20
    output, meta = result["output"], result["metadata"]
    total = 20_000_000 + len("BEGINEND")
    assert meta["output_bytes"] == total
    assert meta["truncated_bytes"] == total - 4096
    assert output.startswith("BEGIN" + "x" * 100)
    assert output.endswith("x" * 100 + "END")
    assert f"[... {total - 4096} bytes cut: showing the first 2048 and the last 2048 of {total}" \
        in output
    assert len(output) < 4096 + 200


@pytest.mark.parametrize("mode", MODES)
async def test_binary_output_is_bounded_readable_text(ws: Path, mode: str) -> None:
    context = ToolContext(cwd=str(ws), sandbox=mode, output_budget_bytes=8192)
    result = await run(context, command=["head", "-c", "300000", "/dev/urandom"])
    output = result["output"]
    assert result["metadata"]["output_bytes"] == 300000
    assert "\x00" not in output
    assert not any(ord(c) < 32 and c not in "\t\n\r" for c in output)
    assert len(output.encode()) < 3 * 8192 + 200  # replacement characters take 3 bytes


@pytest.mark.parametrize("mode", MODES)
async def test_never_ending_output_times_out_bounded(ws: Path, mode: str) -> None:
    context = ToolContext(cwd=str(ws), sandbox=mode, output_budget_bytes=1000)
    started = time.monotonic()
    result = await run(context, command=["yes", "spam"], timeout_ms=700)
    assert time.monotonic() - started < 10
    meta = result["metadata"]
    assert meta["timed_out"] is True
    assert meta["exit_code"] == 124
    assert meta["output_bytes"] > 1000
    assert result["output"].startswith("spam\nspam\n")
    assert result["output"].endswith("[timed out after 700 ms; the process group was killed]")
    assert len(result["output"]) < 1000 + 300


async def test_small_budget_output_within_budget_is_whole(ws: Path) -> None:
    context = ToolContext(cwd=str(ws), sandbox="danger-full-access", output_budget_bytes=64)
    result = await run(context, command=["printf", "a" * 64])
    assert result["output"] == "a" * 64
    assert result["metadata"]["truncated_bytes"] == 0


# -- killing the process group ------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_timeout_kills_grandchildren(ws: Path, mode: str) -> None:
    mark = marker()
    script = f"sleep {mark} & bash -c 'sleep {mark}' & sleep {mark}; wait"
    task = asyncio.create_task(
        run(ToolContext(cwd=str(ws), sandbox=mode), command=["bash", "-c", script],
            timeout_ms=1500)
    )
    pids = await wait_for_pids(mark, 4)  # bash, sleep, bash -c, its sleep, sleep
    result = await task
    assert result["metadata"]["timed_out"] is True
    await assert_gone(pids)
    assert live_pids(mark) == []


@pytest.mark.parametrize("mode", MODES)
async def test_cancellation_kills_grandchildren_and_propagates(ws: Path, mode: str) -> None:
    mark = marker()
    script = f"sleep {mark} & (sleep {mark}; true) & sleep {mark}; wait"
    task = asyncio.create_task(
        run(ToolContext(cwd=str(ws), sandbox=mode), command=["bash", "-c", script])
    )
    pids = await wait_for_pids(mark, 4)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await assert_gone(pids)


@pytest.mark.parametrize("mode", MODES)
async def test_background_children_do_not_outlive_the_command(ws: Path, mode: str) -> None:
    mark = marker()
    started = time.monotonic()
    result = await run(ToolContext(cwd=str(ws), sandbox=mode),
                       command=["bash", "-c", f"sleep {mark} & echo started"])
    assert time.monotonic() - started < 5  # not waiting for the background sleep
    assert result["output"] == "started\n"
    await assert_gone(live_pids(mark))


async def test_a_process_that_left_the_group_cannot_hang_the_call(ws: Path) -> None:
    mark = marker()
    started = time.monotonic()
    try:
        script = f"setsid sleep {mark} & sleep 0.3; echo started"  # setsid has run by then
        result = await run(ToolContext(cwd=str(ws), sandbox="danger-full-access"),
                           command=["bash", "-c", script])
        assert time.monotonic() - started < 5
        assert result["output"].startswith("started\n")
        assert "kept the output open; stopped reading" in result["output"]
    finally:
        for pid in live_pids(mark):
            os.kill(pid, signal.SIGKILL)


@needs_bwrap
async def test_sandbox_pid_namespace_kills_processes_that_left_the_group(ws: Path) -> None:
    mark = marker()
    started = time.monotonic()
    task = asyncio.create_task(run(
        ToolContext(cwd=str(ws)),
        command=["bash", "-c", f"setsid sleep {mark} & sleep 0.5; echo started"],
    ))
    pids = await wait_for_pids(mark, 2)  # bash (its script names the mark) and the sleep
    result = await task
    assert time.monotonic() - started < 5
    assert result["output"] == "started\n"
    await assert_gone(pids)


# -- sandbox setup failures ---------------------------------------------------------------


async def test_missing_bwrap_refuses_sandboxed_commands(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox_module, "BWRAP_PATH", str(ws / "no" / "bwrap"))
    for mode in ("read-only", "workspace-write"):
        with pytest.raises(SandboxUnavailable, match=r"bubblewrap .* was not found.*refused"):
            await run(ToolContext(cwd=str(ws), sandbox=mode), command=["touch", "ran"])
    assert not (ws / "ran").exists()
    # without a sandbox there is nothing to set up
    result = await run(ToolContext(cwd=str(ws), sandbox="danger-full-access"),
                       command=["touch", "ran"])
    assert result["metadata"]["exit_code"] == 0
    assert (ws / "ran").exists()


async def test_bwrap_failing_to_start_refuses(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = ws.parent / "fake-bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sandbox_module, "BWRAP_PATH", str(fake))
    with pytest.raises(SandboxUnavailable, match="could not set up the sandbox "
                       r"\(bwrap: setting up uid map: Permission denied, exit status 1\)"):
        await run(ToolContext(cwd=str(ws)), command=["touch", "ran"])
    assert not (ws / "ran").exists()


async def test_bwrap_that_cannot_be_executed_refuses(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = ws.parent / "broken-bwrap"
    fake.write_bytes(b"\x7fELF garbage")
    fake.chmod(0o755)
    monkeypatch.setattr(sandbox_module, "BWRAP_PATH", str(fake))
    # started directly, or (root) by the `sh` that puts it in its pids cgroup
    with pytest.raises(SandboxUnavailable, match=r"could not be started|Exec format error"):
        await run(ToolContext(cwd=str(ws)), command=["true"])


@needs_bwrap
async def test_sandbox_status_distinguishes_command_failure_from_setup_failure(ws: Path) -> None:
    # the command's own exit status 1 and "bwrap:"-looking output are not a setup failure
    result = await run(ToolContext(cwd=str(ws)),
                       command=["bash", "-c", "echo 'bwrap: fake' >&2; exit 1"])
    assert result["metadata"]["exit_code"] == 1
    assert result["output"] == "bwrap: fake\n"


# -- approval policies --------------------------------------------------------------------


def sandboxed_mode() -> str:
    return "workspace-write" if BWRAP_WORKS else "danger-full-access"


@needs_bwrap
async def test_never_runs_in_the_sandbox_without_asking(ws: Path) -> None:
    asked = Recorder()
    context = ToolContext(cwd=str(ws), approval="never", ask_permission=asked)
    result = await run(context, command=["bash", "-c", "echo $SUBSESSIONS_SANDBOX; touch x"])
    assert result["output"] == "workspace-write\n"
    assert (ws / "x").exists()
    assert asked.requests == []


async def test_never_refuses_escalation_without_asking(ws: Path) -> None:
    asked = Recorder()
    context = ToolContext(cwd=str(ws), approval="never", ask_permission=asked)
    with pytest.raises(EscalationNotAllowed, match="not allowed under the approval policy "
                       "'never'; the command was not run"):
        await run(context, command=["touch", "x"], with_escalated_permissions=True,
                  justification="need it")
    assert asked.requests == []
    assert not (ws / "x").exists()


async def test_a_child_context_never_escalates_nor_asks(ws: Path) -> None:
    asked = Recorder()
    parent = ToolContext(cwd=str(ws), approval="on-request", ask_permission=asked)
    child = parent.for_child()
    assert (child.approval, child.ask_permission, child.cwd, child.sandbox) == (
        "never", None, parent.cwd, parent.sandbox
    )
    started = time.monotonic()
    with pytest.raises(EscalationNotAllowed):
        await run(child, command=["touch", "x"], with_escalated_permissions=True)
    assert time.monotonic() - started < 1
    assert asked.requests == []
    # the child's model is not even offered the escalation fields
    (tool,) = builtin_tools(child, ["shell"])
    assert "with_escalated_permissions" not in tool.parameters["properties"]
    (tool,) = builtin_tools(parent, ["shell"])
    assert "with_escalated_permissions" in tool.parameters["properties"]


async def test_on_request_escalation_approved_runs_unsandboxed(ws: Path) -> None:
    asked = Recorder("approved")
    context = ToolContext(cwd=str(ws), sandbox=sandboxed_mode(), approval="on-request",
                          ask_permission=asked)
    result = await run(context, command=["bash", "-c", "echo $SUBSESSIONS_SANDBOX"],
                       with_escalated_permissions=True, justification="needs the network")
    assert result["output"] == "none\n"
    assert result["metadata"]["sandbox"] == "none"
    if BWRAP_WORKS:
        (request,) = asked.requests
        assert request == {
            "kind": "shell",
            "command": ["bash", "-c", "echo $SUBSESSIONS_SANDBOX"],
            "workdir": real(ws),
            "justification": "needs the network",
            "reason": "escalation",
            "sandbox": "none",
            "tool_call_id": "call_1",
        }


@needs_bwrap
@pytest.mark.parametrize("answer", ["denied-interactively-by-user", "denied-by-rules"])
async def test_on_request_escalation_denied_does_not_run(ws: Path, answer: str) -> None:
    asked = Recorder(answer)
    context = ToolContext(cwd=str(ws), approval="on-request", ask_permission=asked)
    with pytest.raises(ApprovalDenied, match=rf"running \['touch', 'x'\] outside the sandbox "
                       rf"was not approved \({answer}\)"):
        await run(context, command=["touch", "x"], with_escalated_permissions=True)
    assert len(asked.requests) == 1
    assert not (ws / "x").exists()


@needs_bwrap
async def test_on_request_without_a_handler_is_denied(ws: Path) -> None:
    context = ToolContext(cwd=str(ws), approval="on-request")
    with pytest.raises(ApprovalDenied, match=NO_APPROVAL):
        await run(context, command=["touch", "x"], with_escalated_permissions=True)
    assert not (ws / "x").exists()


@needs_bwrap
async def test_on_request_handler_that_fails_is_denied(ws: Path) -> None:
    context = ToolContext(cwd=str(ws), approval="on-request",
                          ask_permission=Recorder(RuntimeError("ui crashed")))
    with pytest.raises(ApprovalDenied, match=NO_APPROVAL):
        await run(context, command=["touch", "x"], with_escalated_permissions=True)


@needs_bwrap
async def test_on_request_without_escalation_stays_sandboxed_and_asks_nothing(ws: Path) -> None:
    asked = Recorder()
    context = ToolContext(cwd=str(ws), approval="on-request", ask_permission=asked,
                          exclude_slash_tmp=True, exclude_tmpdir_env_var=True)
    outside = ws.parent / "outside.txt"
    result = await run(context, command=["touch", str(outside)])
    assert result["metadata"]["exit_code"] != 0
    assert not outside.exists()
    assert asked.requests == []
    # the hint tells the model how to ask
    assert "rerun it with with_escalated_permissions=true" in result["output"]


@needs_bwrap
async def test_untrusted_runs_known_safe_commands_without_asking(ws: Path) -> None:
    asked = Recorder("denied-interactively-by-user")
    context = ToolContext(cwd=str(ws), approval="untrusted", ask_permission=asked)
    (ws / "a.txt").write_text("hello\n")
    for command in (["ls"], ["cat", "a.txt"], ["pwd"], ["bash", "-lc", "cat a.txt | wc -l"],
                    ["git", "status"], ["echo", "hi"]):
        result = await run(context, command=command)
        assert result["metadata"]["sandbox"] == "workspace-write"
    assert asked.requests == []


@needs_bwrap
async def test_untrusted_asks_before_other_commands(ws: Path) -> None:
    asked = Recorder("approved")
    context = ToolContext(cwd=str(ws), approval="untrusted", ask_permission=asked)
    result = await run(context, command=["touch", "made"])
    assert (ws / "made").exists()
    assert result["metadata"]["sandbox"] == "workspace-write"  # approval keeps the sandbox
    (request,) = asked.requests
    assert (request["reason"], request["sandbox"], request["command"]) == (
        "untrusted", "workspace-write", ["touch", "made"]
    )

    asked.answer = "denied-interactively-by-user"
    unsafe = (["rm", "made"], ["bash", "-lc", "ls > listing"], ["bash", "-lc", "ls; rm made"])
    for command in unsafe:
        with pytest.raises(ApprovalDenied, match="denied-interactively-by-user"):
            await run(context, command=command)
    assert (ws / "made").exists()
    assert not (ws / "listing").exists()
    assert len(asked.requests) == 4


@needs_bwrap
async def test_untrusted_escalation_asks_and_runs_unsandboxed(ws: Path) -> None:
    asked = Recorder("approved")
    context = ToolContext(cwd=str(ws), approval="untrusted", ask_permission=asked)
    result = await run(context, command=["ls"], with_escalated_permissions=True,
                       justification="why not")
    assert result["metadata"]["sandbox"] == "none"
    assert asked.requests[0]["reason"] == "escalation"


async def test_untrusted_without_a_handler_denies_unsafe_commands(ws: Path) -> None:
    context = ToolContext(cwd=str(ws), sandbox="danger-full-access", approval="untrusted")
    with pytest.raises(ApprovalDenied, match=NO_APPROVAL):
        await run(context, command=["touch", "x"])
    assert not (ws / "x").exists()
    result = await run(context, command=["ls"])
    assert result["metadata"]["exit_code"] == 0


async def test_escalation_under_full_access_changes_nothing(ws: Path) -> None:
    asked = Recorder()
    for approval in ("never", "on-request"):
        context = ToolContext(cwd=str(ws), sandbox="danger-full-access", approval=approval,
                              ask_permission=asked)
        result = await run(context, command=["true"], with_escalated_permissions=True)
        assert result["metadata"]["sandbox"] == "none"
    assert asked.requests == []


async def test_answers_given_as_a_dict_are_accepted(ws: Path) -> None:
    asked = Recorder({"kind": "approved"})
    context = ToolContext(cwd=str(ws), sandbox="danger-full-access", approval="untrusted",
                          ask_permission=asked)
    result = await run(context, command=["touch", "x"])
    assert result["metadata"]["exit_code"] == 0


async def test_a_plain_function_may_answer(ws: Path) -> None:
    requests: list[dict[str, Any]] = []

    def answer(request: dict[str, Any]) -> str:
        requests.append(request)
        return "denied-by-rules"

    context = ToolContext(cwd=str(ws), sandbox="danger-full-access", approval="untrusted",
                          ask_permission=answer)
    with pytest.raises(ApprovalDenied, match="denied-by-rules"):
        await run(context, command=["touch", "x"])
    assert len(requests) == 1


def test_tool_descriptions_follow_the_policy(ws: Path) -> None:
    def text(**kwargs: Any) -> str:
        return shell_module.description(ToolContext(cwd=str(ws), **kwargs))

    assert "without a sandbox" in text(sandbox="danger-full-access")
    assert "read-only sandbox" in text(sandbox="read-only")
    assert "Network access is off" in text()
    assert "Network access is on" in text(network_access=True)
    assert "with_escalated_permissions=true" in text(approval="on-request")
    assert "with_escalated_permissions" not in text(approval="never")


@pytest.mark.parametrize(("command", "safe"), [
    (["ls", "-la"], True),
    (["cat", "a.txt"], True),
    (["/usr/bin/head", "-n", "3", "a"], True),
    (["git", "status"], True),
    (["git", "diff", "HEAD~1"], True),
    (["git", "branch"], True),
    (["git", "branch", "-D", "main"], False),
    (["git", "commit", "-m", "x"], False),
    (["git", "-c", "core.pager=sh", "log"], False),
    (["git", "diff", "--output=/tmp/x"], False),
    (["find", ".", "-name", "*.py"], True),
    (["find", ".", "-delete"], False),
    (["find", ".", "-exec", "rm", "{}", ";"], False),
    (["rg", "foo"], True),
    (["rg", "--pre", "sh", "foo"], False),
    (["sed", "-n", "1,20p", "f"], True),
    (["sed", "-i", "s/a/b/", "f"], False),
    (["env"], True),
    (["env", "X=1", "rm", "f"], False),
    (["rm", "-rf", "x"], False),
    (["python", "-c", "print(1)"], False),
    (["bash", "-lc", "ls && pwd | wc -l; git status"], True),
    (["bash", "-lc", "ls > out"], False),
    (["bash", "-lc", "ls; rm x"], False),
    (["bash", "-lc", "echo $(rm x)"], False),
    (["bash", "-lc", "echo `rm x`"], False),
    (["bash", "-lc", "ls &"], False),
    (["bash", "-lc", "ls\nrm x"], False),
    (["bash", "-lc", "ls a#b; rm x"], False),
    (["bash", "-lc", "cat 'unterminated"], False),
    (["bash", "-lc", ""], False),
    (["bash", "-x", "ls"], False),
    ([], False),
])
def test_known_safe_commands(command: list[str], safe: bool) -> None:
    from subsessions.tools.safe_commands import is_known_safe

    assert is_known_safe(command) is safe


@needs_bwrap
async def test_concurrent_sandboxed_commands_keep_their_own_output(ws: Path) -> None:
    context = ToolContext(cwd=str(ws))
    results = await asyncio.gather(*(
        run(context, command=["bash", "-c", f"sleep 0.0{i % 3}; echo {i}; exit {i}"])
        for i in range(12)
    ))
    for i, result in enumerate(results):
        assert result["output"] == f"{i}\n"
        assert result["metadata"]["exit_code"] == i
