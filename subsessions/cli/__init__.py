"""The `subsessions` command line. User mistakes print one line on stderr and exit 1.

Each command imports what it runs when it runs: `subsessions mcp` must answer its host's
`initialize` before the engine, the model client or Ray are imported (`subsessions.mcp.front`),
so this module imports none of them, and builds only the `mcp` parser for an `mcp` command.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from subsessions.cli.parser import build_parser
from subsessions.errors import ConfigError, SubsessionError, UnknownSessionType
from subsessions.settings import Settings, default_home, load_settings, with_overrides


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
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
        from subsessions.cli.demo import run_demo

        if args.home is not None:
            return asyncio.run(run_demo(args.home, out))
        with tempfile.TemporaryDirectory(prefix="subsessions-demo-") as scratch:
            code = asyncio.run(run_demo(Path(scratch), out))
        out.write("(a temporary home, removed now; pass --home DIR to keep the rollouts)\n")
        return code
    home: Path = args.home or default_home()
    if args.command in ("run", "resume"):
        from subsessions.cli.run import run_prompt

        return run_prompt(args, home, settings_from_args(args, home), out)
    if args.command == "mcp":
        from subsessions.mcp.server import run_mcp_command  # the optional [mcp] extra

        return run_mcp_command(args, home, settings_from_args(args, home))
    if args.command == "batch":
        from subsessions.cli.batch import run_batch_command
        from subsessions.cli.run import until_sigterm

        return run_batch_command(args, home, settings_from_args(args, home), out,
                                 until_sigterm)
    if args.command == "serve":
        from subsessions.serve.server import run_serve_command

        return run_serve_command(args, home, settings_from_args(args, home))
    if args.command == "a2a":
        from subsessions.a2a.command import run_a2a_command  # the optional [a2a] extra

        return run_a2a_command(args, home, settings_from_args(args, home))
    if args.command == "profiles":
        from subsessions.cli.profiles import show_profiles

        return show_profiles(args, home, out)
    if args.command == "worktrees":
        from subsessions.cli.worktrees import run_worktrees

        return run_worktrees(args, home, out)
    if args.command == "watch":
        from subsessions.watch.command import run_watch

        return run_watch(args, home, out)
    from subsessions.cli.rollouts import run_rollouts

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
        ray=args.ray, model_provider=args.model_provider,
    )


