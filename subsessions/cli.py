"""The `subsessions` command line. User mistakes print one line on stderr and exit 1.

Each command imports what it runs when it runs: `subsessions mcp` must answer its host's
`initialize` before the engine, the model client or Ray are imported (`subsessions.mcp.front`),
so this module imports none of them, and builds only the `mcp` parser for an `mcp` command.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO, TypeVar

from subsessions.cli_parser import build_parser, command_word
from subsessions.errors import ConfigError, SubsessionError, UnknownSessionType
from subsessions.settings import Settings, default_home, load_settings, with_overrides

if TYPE_CHECKING:
    from subsessions.config import SessionConfig

T = TypeVar("T")


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(command_word(argv)).parse_args(argv)
    try:
        code = _run(args, sys.stdout)
        sys.stdout.flush()  # a reader that went away shows here, not at exit
        return code
    except BrokenPipeError:
        return _reader_gone()
    except UnknownSessionType as exc:  # `run/batch --profile`: name it as the user did
        print(f"subsessions: no profile named {exc.name!r}; have: {', '.join(exc.expected)} "
              "(see subsessions profiles list)", file=sys.stderr)
        return 1
    except SubsessionError as exc:
        print(f"subsessions: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _reader_gone() -> int:
    """stdout's reader closed the pipe (`| head`): stop quietly, as a tool killed by SIGPIPE
    would, and point stdout at /dev/null so the flush at exit cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


def _run(args: argparse.Namespace, out: TextIO) -> int:
    if args.command == "demo":
        from subsessions.demo import run_demo

        if args.home is not None:
            return asyncio.run(run_demo(args.home, out))
        with tempfile.TemporaryDirectory(prefix="subsessions-demo-") as scratch:
            code = asyncio.run(run_demo(Path(scratch), out))
        out.write("(a temporary home, removed now; pass --home DIR to keep the rollouts)\n")
        return code
    home: Path = args.home or default_home()
    if args.command in ("run", "resume"):
        return _run_prompt(args, home, out)
    if args.command == "mcp":
        from subsessions.mcp.server import run_mcp_command  # the optional [mcp] extra

        return run_mcp_command(args, home, settings_from_args(args, home))
    if args.command == "batch":
        from subsessions.batch.command import run_batch_command

        return run_batch_command(args, home, settings_from_args(args, home), out,
                                 _until_sigterm)
    if args.command == "serve":
        from subsessions.serve.server import run_serve_command

        return run_serve_command(args, home, settings_from_args(args, home))
    if args.command == "profiles":
        return _profiles(args, home, out)
    if args.command == "watch":
        from subsessions.watch.command import run_watch

        return run_watch(args, home, out)
    from subsessions.rollouts.cli import run_rollouts

    return run_rollouts(args, home, out)


def settings_from_args(args: argparse.Namespace, home: Path) -> Settings:
    """config.toml under `home`, overridden by the model options of the command line."""
    for flag in ("max_depth", "max_children"):
        value = getattr(args, flag)
        if value is not None and value < 0:
            raise ConfigError("command line", f"--{flag.replace('_', '-')}", "must be >= 0")
    return with_overrides(
        load_settings(home), model=args.model, base_url=args.base_url, wire_api=args.wire_api,
        api_key_env=args.api_key_env, max_depth=args.max_depth, max_children=args.max_children,
        ray=args.ray,
    )


def _run_prompt(args: argparse.Namespace, home: Path, out: TextIO) -> int:
    if not args.prompt.strip():
        raise SubsessionError("PROMPT is empty: say what the session should do")
    from subsessions.config import SessionConfig
    from subsessions.instructions import with_base_instructions

    settings = settings_from_args(args, home)
    resume = args.id if args.command == "resume" else None
    config = SessionConfig(
        max_depth=settings.max_depth, max_children=settings.max_children,
        max_queued=settings.max_queued, builtin_tools=True,
        env_policy=settings.env_policy,
        cwd=os.getcwd(), sandbox=args.sandbox, approval=args.approval,
        network_access=args.network, permission_handler=_ask_on_terminal,
        instructions=args.instructions, control=args.control,
    )
    if resume is None:  # a resumed session keeps the instructions it was started with
        config = with_base_instructions(config)
    answer, terminated = asyncio.run(_until_sigterm(
        _run_session(home, settings, config, args.prompt, getattr(args, "profile", None), resume)
    ))
    if terminated:
        return 128 + terminated
    out.write(f"{answer or ''}\n")
    return 0


_STOPS = (signal.SIGTERM, signal.SIGHUP)  # kill(1)'s default, a closed terminal


async def _until_sigterm(work: Awaitable[T]) -> tuple[T | None, int]:
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


async def _ask_on_terminal(request: dict[str, object]) -> str:
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
    from subsessions.cli_engine import engine_from_settings

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


def _profiles(args: argparse.Namespace, home: Path, out: TextIO) -> int:
    from subsessions.profiles import load_profiles

    loaded = load_profiles(home, os.getcwd())
    if args.action == "list":
        for name, entry in loaded.items():
            out.write(f"{name:<16} {entry.source:<10} {entry.profile.description}\n")
        return 0
    if args.name not in loaded:
        raise SubsessionError(f"no profile named {args.name!r}; have: {', '.join(loaded)}")
    entry = loaded[args.name]
    profile = entry.profile
    out.write(f"name: {profile.name}\nsource: {entry.source}\ndescription: {profile.description}\n")
    out.write(f"model: {profile.model}\nfallback_models: {list(profile.fallback_models)}\n")
    tools = "all of the parent's" if profile.tools is None else list(profile.tools)
    out.write(f"tools: {tools}\nmax_turns: {profile.max_turns}\n")
    out.write(f"developer_instructions:\n{profile.developer_instructions}")
    for label in ("persona", "memory"):
        text = getattr(profile, label)
        if text:
            out.write(f"{label} (top-level only):\n{text}\n")
    return 0


