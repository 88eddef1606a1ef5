"""`subsessions batch INPUT --profile P --prompt TEMPLATE --out OUTPUT` (and `--resume ID`).

Runs a top-level session whose children are the batch's items, shows progress on stderr
and ends with one summary line on stdout. Exit 0 when every item completed, 1 otherwise
(a refusal is one line on stderr); interrupted, the running children are cancelled and
journaled, and the line says how to resume.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

import orjson

from subsessions._util.safe_read import NotReadable, read_regular
from subsessions.batch import planning
from subsessions.batch.runner import Batch, BatchResult
from subsessions.budget import Budget
from subsessions.cli import batch_progress as progress
from subsessions.config import SessionConfig
from subsessions.engine.command_hooks import hooks_from_settings
from subsessions.engine.from_settings import engine_from_settings
from subsessions.errors import BatchError, ConfigError, UnknownSessionType
from subsessions.profiles import LoadedProfile, load_profiles
from subsessions.settings import Settings, default_home, with_overrides
from subsessions.tools.context import SANDBOX_MODES

Guard = Callable[[Awaitable[BatchResult]], Coroutine[Any, Any, tuple[BatchResult | None, int]]]
BAR_SECONDS = 0.2
# What a batch's journal keeps of its command line for `--resume` (never a key), by type
KEPT: dict[str, type] = {"model": str, "model_provider": str, "base_url": str,
                         "wire_api": str, "api_key_env": str,
                         "max_depth": int, "max_children": int, "ray": str, "sandbox": str,
                         "network": bool}
DEFAULT_SANDBOX = "workspace-write"


def _budget(args: argparse.Namespace) -> Budget | None:
    limits = {"max_turns": args.budget_turns, "max_tokens": args.budget_tokens,
              "max_seconds": args.budget_seconds}
    if all(value is None for value in limits.values()):
        return None
    try:
        return Budget(**limits)
    except ValueError as exc:
        raise BatchError(f"--budget-*: {exc}") from None


def _check(args: argparse.Namespace) -> None:
    given = [flag for flag, value in (("INPUT", args.input), ("--profile", args.profile),
                                      ("--prompt", args.prompt), ("--out", args.out))
             if value is not None]
    if args.resume is not None and given:
        raise BatchError(f"--resume runs the batch as it was made; drop {', '.join(given)}")
    if args.resume is None and len(given) < 4:
        missing = [f for f in ("INPUT", "--profile", "--prompt", "--out") if f not in given]
        raise BatchError(f"batch needs {', '.join(missing)} (or --resume BATCH_ID)")
    if args.concurrency is not None and args.concurrency < 1:
        raise BatchError("--concurrency must be at least 1")


def _output_schema(path: str | None) -> dict[str, Any] | None:
    """`--output-schema FILE`: the JSON Schema it holds (checked when the batch is planned)."""
    if path is None:
        return None
    try:
        schema = orjson.loads(read_regular(Path(path), 1 << 20))
    except FileNotFoundError:
        raise BatchError(f"--output-schema {path}: no such file") from None
    except NotReadable as exc:
        raise BatchError(f"--output-schema {path}: {exc}") from None
    except orjson.JSONDecodeError as exc:
        raise BatchError(f"--output-schema {path} is not JSON ({exc})") from None
    if not isinstance(schema, dict):
        raise BatchError(f"--output-schema {path} holds no JSON Schema object")
    return schema


def run_batch_command(args: argparse.Namespace, home: Path, settings: Settings, out: TextIO,
                      guard: Guard) -> int:
    """Run the command; `guard` turns SIGTERM into a cancel (the CLI's own)."""
    _check(args)
    budget = _budget(args)
    cwd = Path(os.getcwd())
    concurrency = args.concurrency
    profiles = load_profiles(home, str(cwd))
    if args.profile is not None and args.profile not in profiles:
        raise UnknownSessionType(args.profile, tuple(profiles))
    if args.resume is not None:
        batch = planning.reopen(home, args.resume, max_concurrency=concurrency, budget=budget)
    else:
        batch = planning.plan(
            home, args.profile, args.input, args.prompt, args.out,
            max_concurrency=concurrency or 16, budget=budget, cwd=cwd,
            workspace=None if args.sandbox == "danger-full-access" else cwd,
            replace=args.force, options=_options(args),
            output_schema=_output_schema(args.output_schema))
    try:
        if args.resume is not None:
            settings = _resumed(args, settings, batch)
        config = SessionConfig(
            max_depth=settings.max_depth, max_children=max(settings.max_children,
                                                           batch.max_concurrency),
            max_queued=settings.max_queued,
            builtin_tools=True, env_policy=settings.env_policy, cwd=str(cwd),
            sandbox=args.sandbox, approval="never", network_access=args.network,
            control=args.control, hooks=hooks_from_settings(settings.command_hooks))
    except BaseException:
        batch.close()
        raise
    err = sys.stderr
    err.write(f"subsessions batch {batch.batch_id}: {batch.counters.total} items, "
              f"{batch.journal.completed} completed before; journal {batch.journal.path}\n")
    err.flush()
    display = progress.choose(err, batch.counters.total, args.progress_every)
    try:
        result, signum = asyncio.run(guard(_run(batch, home, settings, config, display,
                                                      profiles)))
    except KeyboardInterrupt:
        out.write(_interrupted(batch, home))
        return 130
    if signum or result is None:
        out.write(_interrupted(batch, home))
        return 128 + signum
    out.write(summary(result, home))
    return 0 if result.completed == result.total else 1


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """What a new batch's journal keeps of the command line for `--resume`: its model
    options (an API key's variable name at most; a base URL carrying credentials is not
    kept) and the sandbox its children run in."""
    kept = {name: getattr(args, name) for name in KEPT if name not in (
        "sandbox", "network") and getattr(args, name) is not None}
    url = urlsplit(kept.get("base_url", ""))
    if url.username is not None or url.password is not None or url.query:
        del kept["base_url"]
    return {**kept, "sandbox": args.sandbox, "network": args.network}


def _resumed(args: argparse.Namespace, settings: Settings, batch: Batch) -> Settings:
    """The settings (and `args`' sandbox) of a resume: its journal's options, under those
    given again on the command line."""
    kept: dict[str, Any] = batch.journal.header.get("options", {})
    for name, value in kept.items():
        if name in KEPT and value is not None and _unfit(name, value):
            raise batch.journal.damaged(1, f"its option {name} is {value!r}")
    if args.sandbox == DEFAULT_SANDBOX and "sandbox" in kept:
        args.sandbox = kept["sandbox"]
    args.network = args.network or kept.get("network") is True
    again = {name: kept.get(name) for name in KEPT if name not in ("sandbox", "network")
             and getattr(args, name) is None}
    try:
        return with_overrides(settings, **again)
    except ConfigError as exc:  # the command line's own were checked before
        raise batch.journal.damaged(1, f"its options: {exc}") from None


def _unfit(name: str, value: Any) -> bool:
    if type(value) is not KEPT[name]:
        return True
    return (isinstance(value, int) and value < 0) or (name == "sandbox"
                                                      and value not in SANDBOX_MODES)


async def _run(batch: Batch, home: Path, settings: Settings, config: SessionConfig,
               display: progress.Display, profiles: Mapping[str, LoadedProfile]) -> BatchResult:
    shown: asyncio.Task[None] | None = None
    try:  # the profiles read once (a skipped agent file is one warning, not two)
        async with engine_from_settings(home, settings, profiles) as engine:
            parent = await engine.create_session(config, source="cli")
            shown = asyncio.get_running_loop().create_task(
                progress.follow(batch.counters, display, BAR_SECONDS))
            return await batch.run(parent.subsessions)
    finally:
        batch.close()  # when it never ran (the engine did not start)
        if shown is not None:
            shown.cancel()
            await asyncio.wait((shown,))
            if not shown.cancelled():
                shown.exception()  # taken: a display that failed does not fail the batch


def summary(result: BatchResult, home: Path) -> str:
    text = (f"batch {result.batch_id}: {result.completed}/{result.total} completed, "
            f"{result.failed} failed, {result.cancelled} cancelled; output {result.output_path}")
    if result.completed < result.total:
        text += f"; resume with: {resume_command(result.batch_id, home)}"
    return text + "\n"


def _interrupted(batch: Batch, home: Path) -> str:
    c = batch.counters
    return (f"batch {batch.batch_id} interrupted: {c.completed}/{c.total} completed; resume "
            f"with: {resume_command(batch.batch_id, home)}\n")


def resume_command(batch_id: str, home: Path) -> str:
    """The command that resumes the batch as printed (its home named unless the default)."""
    where = os.path.abspath(home)
    named = "" if where == os.path.abspath(default_home()) else f" --home {shlex.quote(where)}"
    return f"subsessions{named} batch --resume {batch_id}"
