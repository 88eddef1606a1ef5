"""`config.toml` command hooks, as Claude Code runs its own: for MCP hosts and
the command line, whose sessions have no Python host to register `Hooks`.

Each `[[hooks.SubagentStart]]` or `[[hooks.SubagentStop]]` command gets the event as JSON on
stdin (with `hook_event_name`) and answers JSON on stdout, exit 0; another exit code, bad
JSON or its `timeout` allows (the command is killed), and is logged. Several commands of one
event run in order: the first block keeps a child going; start contexts are joined.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable, Coroutine
from typing import Any

import orjson

from subsessions.config import Hooks
from subsessions.settings import CommandHook

log = logging.getLogger("subsessions")
_MAX_ANSWER = 1 << 20  # bytes of a hook's stdout that are read

Hook = Callable[[dict[str, Any]], Coroutine[Any, Any, dict[str, Any] | None]]


def hooks_from_settings(commands: tuple[CommandHook, ...]) -> Hooks | None:
    """The `Hooks` a session of the command line or of an MCP host gets (None: no commands)."""
    start = [c for c in commands if c.event == "SubagentStart"]
    stop = [c for c in commands if c.event == "SubagentStop"]
    if not start and not stop:
        return None
    return Hooks(on_subagent_start=_joined(start) if start else None,
                 on_subagent_stop=_first_block(stop) if stop else None)


def _joined(commands: list[CommandHook]) -> Hook:
    async def start(data: dict[str, Any]) -> dict[str, Any] | None:
        contexts = [str(answer["additional_context"]) for command in commands
                    if (answer := await run_command(command, data)) is not None
                    and isinstance(answer.get("additional_context"), str)]
        return {"additional_context": "\n\n".join(contexts)} if contexts else None

    return start


def _first_block(commands: list[CommandHook]) -> Hook:
    async def stop(data: dict[str, Any]) -> dict[str, Any] | None:
        for command in commands:
            answer = await run_command(command, data)
            if answer is not None and answer.get("decision") == "block":
                return answer
        return None

    return stop


async def run_command(hook: CommandHook, data: dict[str, Any]) -> dict[str, Any] | None:
    """Run one command hook; its JSON object answer, or None (it allows)."""
    payload = orjson.dumps({"hook_event_name": hook.event, **data}, default=str)
    process = await asyncio.create_subprocess_shell(
        hook.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL, start_new_session=True)
    try:
        async with asyncio.timeout(hook.timeout):
            out, _ = await process.communicate(payload)
    except TimeoutError:
        log.warning("subsessions: hook %r took over %gs; allowed", hook.command, hook.timeout)
        return None
    finally:
        if process.returncode is None:  # the command and whatever it started
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
    if process.returncode != 0:
        log.warning("subsessions: hook %r exited %s; allowed", hook.command, process.returncode)
        return None
    try:
        answer = orjson.loads(out[:_MAX_ANSWER]) if out.strip() else None
    except orjson.JSONDecodeError:
        log.warning("subsessions: hook %r did not answer JSON; allowed", hook.command)
        return None
    return answer if isinstance(answer, dict) else None
