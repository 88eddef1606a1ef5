"""`subsessions run` and `resume`: one session on the terminal, its approvals asked there,
ended by SIGTERM or SIGHUP as by Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO, TypeVar

from subsessions.errors import SubsessionError
from subsessions.settings import Settings

if TYPE_CHECKING:
    from subsessions.config import SessionConfig

T = TypeVar("T")


def run_prompt(args: argparse.Namespace, home: Path, settings: Settings, out: TextIO) -> int:
    if not args.prompt.strip():
        raise SubsessionError("PROMPT is empty: say what the session should do")
    from subsessions.config import SessionConfig
    from subsessions.engine.command_hooks import hooks_from_settings
    from subsessions.engine.instructions import with_base_instructions

    resume = args.id if args.command == "resume" else None
    config = SessionConfig(
        max_depth=settings.max_depth, max_children=settings.max_children,
        max_queued=settings.max_queued, builtin_tools=True,
        env_policy=settings.env_policy,
        cwd=os.getcwd(), sandbox=args.sandbox, approval=args.approval,
        network_access=args.network, permission_handler=ask_on_terminal,
        instructions=args.instructions, control=args.control,
        hooks=hooks_from_settings(settings.command_hooks),
    )
    if resume is None:  # a resumed session keeps the instructions it was started with
        config = with_base_instructions(config)
    answer, terminated = asyncio.run(until_sigterm(
        _run_session(home, settings, config, args.prompt, getattr(args, "profile", None), resume)
    ))
    if terminated:
        return 128 + terminated
    out.write(f"{answer or ''}\n")
    return 0


_STOPS = (signal.SIGTERM, signal.SIGHUP)  # kill(1)'s default, a closed terminal


async def until_sigterm(work: Awaitable[T]) -> tuple[T | None, int]:
    """Await `work`; SIGTERM (or SIGHUP) cancels it as Ctrl-C does. Returns (result, the
    signal that ended it or 0).

    Without this a SIGTERM kills the process at once: tool commands outside the sandbox
    (danger-full-access, an approved escalation) live on under init and no rollout ends.
    Cancelled, the engine aborts the whole tree, kills every tool process group and
    writes each `turn_aborted` before this returns.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    terminated = 0

    def on_signal(signum: int) -> None:
        nonlocal terminated
        if not terminated:
            terminated = signum
            task.cancel()

    for signum in _STOPS:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        return await work, 0
    except asyncio.CancelledError:
        if not terminated or task.uncancel() > 0:
            raise  # cancelled by someone else (Ctrl-C): theirs to handle
        return None, terminated
    finally:
        for signum in _STOPS:
            loop.remove_signal_handler(signum)


async def ask_on_terminal(request: dict[str, object]) -> str:
    """The top-level session's approvals, asked on the terminal when there is one.

    The question waits on a daemon thread, so children keep running meanwhile and a
    Ctrl-C is never held up by an unanswered prompt.
    """
    if not sys.stdin.isatty():
        return "denied-no-approval-rule-and-could-not-request-from-user"
    what = request.get("command") or request.get("paths") or request.get("tool_name")
    reason = request.get("justification") or request.get("reason") or ""
    question = f"subsessions: allow {request.get('kind')} {what} ({reason})? [y/N] "
    loop = asyncio.get_running_loop()
    answered: asyncio.Future[str] = loop.create_future()

    def settle(text: str) -> None:
        if not answered.done():
            answered.set_result(text)

    def ask() -> None:
        try:
            text = input(question)
        except EOFError:
            text = ""
        with contextlib.suppress(RuntimeError):  # the loop ended first: nobody waits any more
            loop.call_soon_threadsafe(settle, text)

    threading.Thread(target=ask, name="subsessions-approval", daemon=True).start()
    answer = await answered
    return "approved" if answer.strip().lower() in ("y", "yes") else "denied-interactively-by-user"


async def _run_session(
    home: Path, settings: Settings, config: SessionConfig, prompt: str, profile: str | None,
    resume: str | None,
) -> str | None:
    from subsessions.engine.from_settings import engine_from_settings

    async with engine_from_settings(home, settings) as engine:
        if resume is None:
            session = await engine.create_session(config, source="cli", profile=profile)
        else:
            session = await engine.resume_session(resume, config)
            if session.resume_report and "skipped" in session.resume_report:
                print(f"subsessions: {session.resume_report}", file=sys.stderr)
        try:
            return await session.send_and_wait(prompt)
        except asyncio.CancelledError:
            if _cancelling():
                raise  # Ctrl-C or SIGTERM: theirs to report
            raise SubsessionError("the session was cancelled (through the control "
                                  "socket)") from None


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
