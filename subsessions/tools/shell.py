"""`shell`: run one command (an argv; no shell unless asked for) in the session's sandbox.

Output (Codex's shape): `{"output": "...", "metadata": {"exit_code": 0,
"duration_seconds": 0.12, "timed_out": false, "sandbox": "workspace-write",
"output_bytes": 2048, "truncated_bytes": 0}}`. A timeout is a result, not an error:
`exit_code` 124 (as `timeout(1)`), `timed_out` true and the output so far. Errors
(raised, so the model sees a failed tool output): bad arguments, a command that is not
found, an approval refused, a sandbox that cannot be set up.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
from collections.abc import Mapping
from typing import Any

import orjson

from subsessions.environment import command_environment
from subsessions.errors import InvalidArguments
from subsessions.tools import limits, sandbox, seccomp
from subsessions.tools.approval import approve_shell
from subsessions.tools.context import ToolContext
from subsessions.tools.errors import (
    CommandNotFound,
    FileToolError,
    SandboxUnavailable,
    ToolError,
)
from subsessions.tools.process import ProcessResult, run_process
from subsessions.tools.schema import check_arguments

NAME = "shell"
DEFAULT_TIMEOUT_MS = 60_000
MAX_TIMEOUT_MS = 3_600_000
TIMEOUT_EXIT_CODE = 124

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {
            "type": "array",
            "items": {"type": "string"},
            "description": "The program and its arguments, e.g. [\"pytest\", \"-q\"]. No shell "
            "is involved; for pipes or redirection use [\"bash\", \"-lc\", \"<script>\"].",
        },
        "workdir": {
            "type": "string",
            "description": "Directory to run in, relative to the workspace (default: it).",
        },
        "timeout_ms": {
            "type": "integer",
            "description": f"Kill the command after this many ms (default {DEFAULT_TIMEOUT_MS}, "
            f"at most {MAX_TIMEOUT_MS}).",
        },
        "with_escalated_permissions": {
            "type": "boolean",
            "description": "Ask the user to run this command outside the sandbox.",
        },
        "justification": {
            "type": "string",
            "description": "With with_escalated_permissions: one sentence on why it is needed.",
        },
    },
    "required": ["command"],
    "additionalProperties": False,
}
_ESCALATION = ("with_escalated_permissions", "justification")
_SANDBOX_DENIAL = re.compile(
    r"Read-only file system|Permission denied|Operation not permitted|Network is unreachable|"
    r"Temporary failure in name resolution|Name or service not known"
)
# C0 controls other than \t \n \r (and DEL) would only garble the text a model reads
_CONTROLS = {c: "\ufffd" for c in (*range(9), 11, 12, *range(14, 32), 127)}


def parameters(context: ToolContext) -> dict[str, Any]:
    """The advertised schema; escalation fields only where the policy can honour them."""
    if context.approval != "never" and context.sandbox != "danger-full-access":
        return PARAMETERS
    properties = {k: v for k, v in PARAMETERS["properties"].items() if k not in _ESCALATION}
    return {**PARAMETERS, "properties": properties}


def description(context: ToolContext) -> str:
    text = (
        "Run a command and return its exit code, wall time and output (stdout and stderr "
        "interleaved; long output keeps its head and tail). "
    )
    if context.sandbox == "danger-full-access":
        return text + "Commands run without a sandbox."
    net = "on" if context.sandbox == "workspace-write" and context.network_access else "off"
    if context.sandbox == "read-only":
        text += "Commands run in a read-only sandbox: nothing can be written. "
    else:
        text += (
            "Commands run in a sandbox: only the workspace and temp dirs are writable "
            "(.git stays read-only). "
        )
    text += f"Network access is {net}."
    if context.approval == "on-request":
        text += (
            " If a command needs to write elsewhere or reach the network, rerun it with "
            "with_escalated_permissions=true and a one-sentence justification; the user "
            "decides."
        )
    elif context.approval == "untrusted":
        text += " Commands other than simple read-only ones wait for the user's approval."
    return text


async def run_shell(context: ToolContext, arguments: dict[str, Any], invocation: Any) -> str:
    arguments = {k: v for k, v in arguments.items() if v is not None}
    check_arguments(NAME, PARAMETERS, arguments)
    command: list[str] = arguments["command"]
    if not command or not command[0]:
        raise InvalidArguments(NAME, "command must be a non-empty array of strings")
    if any("\0" in part for part in command):
        raise InvalidArguments(NAME, "command must not contain NUL characters")
    workdir = _workdir(context, arguments.get("workdir"))
    timeout_ms = _timeout_ms(arguments.get("timeout_ms"))
    env = command_environment(context.env_policy)  # never the engine's secrets (Codex's policy)
    _check_program(command[0], workdir, env)  # before anyone is asked to approve it
    sandboxed = await approve_shell(
        context,
        command,
        workdir,
        escalate=bool(arguments.get("with_escalated_permissions")),
        justification=arguments.get("justification"),
        call_id=getattr(invocation, "tool_call_id", None),
    )
    env["SUBSESSIONS_SANDBOX"] = context.sandbox if sandboxed else "none"
    if sandboxed and (context.sandbox == "read-only" or not context.network_access):
        env["SUBSESSIONS_SANDBOX_NETWORK_DISABLED"] = "1"
    budget = context.output_budget_bytes
    if sandboxed:
        result = await _run_sandboxed(context, command, workdir, env, timeout_ms, budget)
    else:
        try:
            result = await run_process(
                command, cwd=workdir, env=env, timeout=timeout_ms / 1000, budget=budget
            )
        except OSError as exc:
            raise ToolError(f"could not run {command[0]!r}: {exc.strerror or exc}") from None
    return _format(result, context, sandboxed, timeout_ms)


async def _run_sandboxed(
    context: ToolContext,
    command: list[str],
    workdir: str,
    env: dict[str, str],
    timeout_ms: int,
    budget: int,
) -> ProcessResult:
    status_read, status_write = os.pipe()
    filter_fd = None
    try:
        filter_fd = seccomp.filter_fd()
        argv = sandbox.bwrap_argv(context, command, workdir, status_write, filter_fd)
        passed = (status_write,) if filter_fd is None else (status_write, filter_fd)
        try:
            with limits.process_cgroup(context.max_processes) as procs:
                result = await run_process(
                    limits.limited(argv, procs), cwd=workdir, env=env,
                    timeout=timeout_ms / 1000, budget=budget, pass_fds=passed,
                )
        except OSError as exc:
            raise SandboxUnavailable(
                f"bubblewrap ({argv[0]}) could not be started: {exc.strerror or exc}"
            ) from None
        status = _read_available(status_read)
    finally:
        for fd in (status_read, status_write, filter_fd):
            if fd is not None:
                os.close(fd)
    if not result.timed_out and not _command_ran(status):
        said = (result.head + result.tail)[:1000].decode("utf-8", "replace").strip()
        raise SandboxUnavailable(
            f"bubblewrap could not set up the sandbox ({said or 'no message'}, "
            f"exit status {result.returncode})"
        )
    return result


def _read_available(fd: int) -> bytes:
    os.set_blocking(fd, False)
    chunks = []
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _command_ran(status: bytes) -> bool:
    """bwrap reports `{"exit-code": n}` on its status fd only when the command ran."""
    for line in status.splitlines():
        with contextlib.suppress(orjson.JSONDecodeError):
            value = orjson.loads(line)
            if isinstance(value, dict) and "exit-code" in value:
                return True
    return False


def _workdir(context: ToolContext, workdir: str | None) -> str:
    path = sandbox.resolve(context.cwd, workdir or ".")
    if not os.path.isdir(path):
        shown = workdir if workdir else context.cwd
        raise FileToolError(f"workdir {shown!r} is not an existing directory")
    return path


def _timeout_ms(value: int | float | None) -> int:
    if value is None:
        return DEFAULT_TIMEOUT_MS
    if value <= 0:
        raise InvalidArguments(NAME, f"timeout_ms must be positive, not {value}")
    return min(int(value), MAX_TIMEOUT_MS)


def _check_program(program: str, workdir: str, env: Mapping[str, str]) -> None:
    if "/" in program:
        path = os.path.join(workdir, program)
        if not os.path.exists(path):
            raise CommandNotFound(program, "no such file")
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            raise CommandNotFound(program, "not an executable file")
    elif shutil.which(program, path=env.get("PATH", os.defpath)) is None:
        raise CommandNotFound(program, "not on PATH")


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace").translate(_CONTROLS)


def _format(result: ProcessResult, context: ToolContext, sandboxed: bool, timeout_ms: int) -> str:
    output = _text(result.head)
    if result.cut_bytes:
        output += (
            f"\n[... {result.cut_bytes} bytes cut: showing the first {len(result.head)} and the "
            f"last {len(result.tail)} of {result.total_bytes} bytes ...]\n"
        )
    output += _text(result.tail)
    notes = []
    code = result.returncode
    if result.timed_out:
        code = TIMEOUT_EXIT_CODE
        notes.append(f"[timed out after {timeout_ms} ms; the process group was killed]")
    elif code < 0:
        with contextlib.suppress(ValueError):
            notes.append(f"[killed by signal {signal.Signals(-code).name}]")
        code = 128 - code
    if result.pipe_held_open:
        notes.append("[a process that left the process group kept the output open; "
                     "stopped reading]")
    if (sandboxed and code != 0 and context.approval == "on-request"
            and _SANDBOX_DENIAL.search(output)):
        notes.append(
            f"[this ran in the {context.sandbox} sandbox; if it failed because of the "
            "sandbox, rerun it with with_escalated_permissions=true and a justification]"
        )
    if notes:
        output += ("" if not output or output.endswith("\n") else "\n") + "\n".join(notes)
    return orjson.dumps({
        "output": output,
        "metadata": {
            "exit_code": code,
            "duration_seconds": round(result.duration, 3),
            "timed_out": result.timed_out,
            "sandbox": context.sandbox if sandboxed else "none",
            "output_bytes": result.total_bytes,
            "truncated_bytes": result.cut_bytes,
        },
    }).decode()
