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
from typing import TYPE_CHECKING, NoReturn, TextIO, TypeVar

from subsessions._version import __version__
from subsessions.control import CONTROL_HELP
from subsessions.errors import ConfigError, SubsessionError, UnknownSessionType
from subsessions.mcp.server import idle_timeout_option
from subsessions.settings import Settings, default_home, load_settings, with_overrides

if TYPE_CHECKING:
    from subsessions.config import SessionConfig

T = TypeVar("T")


class _Parser(argparse.ArgumentParser):
    """A usage mistake is one line on stderr (DESIGN 3.3), not argparse's usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _command(argv: Sequence[str]) -> str | None:
    """The command word of `argv` (the first word that is not `--home` or its value)."""
    words = iter(argv)
    for word in words:
        if word == "--home":
            next(words, None)
        elif not word.startswith("--home="):
            return word
    return None


def _parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; for `mcp`, with that command's parser only (the others
    import the engine to describe themselves)."""
    home_help = "state directory (default: $SUBSESSIONS_HOME, else ~/.subsessions)"
    common = _Parser(add_help=False)
    # SUPPRESS: a --home given before the command is not overwritten by the command's default
    common.add_argument("--home", type=Path, default=argparse.SUPPRESS, help=home_help)
    model_options = _Parser(add_help=False)
    model_options.add_argument("--model", help="model id (config: model)")
    model_options.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. "
                               "http://127.0.0.1:11434/v1")
    model_options.add_argument("--wire-api", choices=("responses", "chat"),
                               help="Responses API or Chat Completions")
    model_options.add_argument("--api-key-env", metavar="NAME",
                               help="variable holding the API key (default OPENAI_API_KEY; "
                               "not needed for a loopback URL)")
    model_options.add_argument("--max-depth", type=int, help="how deep sub-sessions may nest")
    model_options.add_argument("--max-children", type=int,
                               help="sub-sessions running at once in the tree")
    model_options.add_argument("--ray", metavar="ADDRESS",
                               help="run sub-sessions on a Ray cluster: 'local', 'auto' or "
                               "ray://HOST:PORT (needs the [ray] extra; config: [ray])")
    work_options = _Parser(add_help=False)
    work_options.add_argument(
        "--sandbox", choices=("read-only", "workspace-write", "danger-full-access"),
        default="workspace-write",
        help="what shell commands may touch (default workspace-write: the current directory)",
    )
    work_options.add_argument(
        "--approval", choices=("untrusted", "on-request", "never"), default="never",
        help="when to ask before running a command (default never; sub-sessions never ask)",
    )
    work_options.add_argument("--network", action="store_true",
                              help="allow network access under workspace-write")
    work_options.add_argument("--instructions", metavar="TEXT",
                              help="the session's own instructions, instead of the base text "
                              "on the sub-session tools (resume: instead of the stored ones)")
    parser = _Parser(
        prog="subsessions",
        description="Spawn, drive, wait for, cancel and inspect LLM sub-sessions.",
    )
    parser.add_argument("--home", type=Path, default=None, help=home_help)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    if command == "mcp":
        _add_mcp_command(commands, common, model_options)
        return parser
    commands.add_parser(
        "demo", parents=[common],
        help="offline demo: a scripted parent fans out, waits, cancels, prints the tree",
        description="Runs the main job offline on a scripted model, in a temporary home "
        "unless --home is given.",
    )
    run = commands.add_parser(
        "run", parents=[common, model_options, work_options],
        help="run a session with the sub-session tools on the configured model",
        description="Runs PROMPT to completion on the configured model; prints the final "
        "message. Ctrl-C cancels the session and every sub-session (exit 130).",
    )
    run.add_argument("prompt")
    run.add_argument("--profile", help="run this profile top-level (its persona and memory too)")
    run.add_argument("--control", action="store_true", help=CONTROL_HELP)

    resume = commands.add_parser(
        "resume", parents=[common, model_options, work_options],
        help="continue a session from its rollout with a new prompt",
        description="Rebuilds the session's history from its rollout (an id, a unique prefix "
        "or a path), appends to the same file, and runs PROMPT; prints the final message.",
    )
    resume.add_argument("id")
    resume.add_argument("prompt")
    resume.add_argument("--control", action="store_true", help=CONTROL_HELP)

    _add_mcp_command(commands, common, model_options)
    from subsessions.batch.command import add_batch_command
    from subsessions.rollouts.cli import add_rollout_commands
    from subsessions.serve.server import add_serve_command
    from subsessions.watch.command import add_watch_command

    add_serve_command(commands, [common, model_options])
    add_batch_command(commands, [common, model_options, work_options])

    profiles = commands.add_parser("profiles", help="the loaded profiles")
    profile_commands = profiles.add_subparsers(dest="action", required=True, metavar="ACTION")
    profile_commands.add_parser("list", parents=[common], help="names, sources, descriptions")
    show_profile = profile_commands.add_parser("show", parents=[common], help="one profile")
    show_profile.add_argument("name")

    add_rollout_commands(commands, common)
    add_watch_command(commands, common)
    return parser


def _add_mcp_command(commands: argparse._SubParsersAction,  # type: ignore[type-arg]
                     common: argparse.ArgumentParser,
                     model_options: argparse.ArgumentParser) -> None:
    mcp = commands.add_parser(
        "mcp", parents=[common, model_options],
        help="serve the sub-session tools to an MCP host (stdio, or --http)",
        description="An MCP server offering create_session, wait_session, wait_sessions, "
        "cancel_session and list_sessions; each client connection is one top-level session.",
    )
    mcp.add_argument("--http", metavar="HOST:PORT",
                     help="serve streamable HTTP instead of stdio (loopback by default)")
    mcp.add_argument("--session-idle-timeout", type=idle_timeout_option, metavar="SECONDS",
                     help="HTTP: close a client's session, cancelling its running "
                     "sub-sessions, after this long with no request and no open stream "
                     "(default 120, at most 2592000: 30 days)")


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser(_command(argv)).parse_args(argv)
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
    from subsessions.engine import Engine
    from subsessions.models.factory import build_model_client
    from subsessions.ray.backend import backend_from

    client = build_model_client(settings)
    try:
        async with Engine(home, model_client=client, model=settings.model,
                          model_provider=settings.model_provider,
                          mcp_servers=settings.mcp_servers, mcp_source=settings.source,
                          backend=backend_from(settings)) as engine:
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
    finally:
        await client.aclose()


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


