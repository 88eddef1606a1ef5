"""Planning a batch: everything checked before one child starts, then run to its end.

`plan` checks a new batch whole (paths, template, input, the CSV's columns) and only then
creates its journal; `reopen` reads a batch's journal for a resume and checks that its input
is the very file it was made from. A refusal is one line (`BatchError`); nothing is written.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from subsessions.batch.journal import Journal
from subsessions.batch.output import Output
from subsessions.batch.runner import Batch, BatchHost, BatchResult
from subsessions.batch.source import Scan, format_of, scan
from subsessions.batch.template import Template
from subsessions.budget import Budget
from subsessions.errors import BatchError, InvalidArguments, UnknownSessionType
from subsessions.ids import new_session_id
from subsessions.tools.schema import check_output_schema, fork_turns_of


async def run_batch(
    host: BatchHost, home: Path, session_type: str, input_path: str | os.PathLike[str],
    prompt: str, output_path: str | os.PathLike[str], *, max_concurrency: int | None = 16,
    budget: Budget | None = None, resume: str | None = None, cwd: Path,
    workspace: str | os.PathLike[str] | None = None, call_id: str | None = None,
    output_schema: dict[str, Any] | None = None, fork_turns: int | str | None = None,
) -> BatchResult:
    """Plan a new batch (or reopen one to resume) and run it to its end."""
    if resume is not None:
        make = functools.partial(reopen, home, resume, max_concurrency=max_concurrency,
                                 budget=budget)
    else:
        if session_type not in host.profiles():
            raise UnknownSessionType(session_type, tuple(host.profiles()))
        make = functools.partial(
            plan, home, session_type, input_path, prompt, output_path,
            max_concurrency=16 if max_concurrency is None else max_concurrency, budget=budget,
            cwd=cwd, workspace=None if workspace is None else Path(workspace),
            output_schema=output_schema, fork_turns=fork_turns)
    batch = await _off_the_loop(make)
    return await batch.run(host, call_id)


async def _off_the_loop(make: Callable[[], Batch]) -> Batch:
    """The checking pass reads the whole input: in a thread, so other sessions run meanwhile.
    A caller cancelled meanwhile leaves no journal open behind it."""
    future = asyncio.ensure_future(asyncio.to_thread(make))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        future.add_done_callback(_close_unused)
        await asyncio.wait((future,))  # the pass ends by itself; the cancel then goes on
        raise


def _close_unused(future: asyncio.Future[Batch]) -> None:
    if not future.cancelled() and future.exception() is None:
        future.result().close()


def resolve(path: str | os.PathLike[str], cwd: Path, workspace: Path | None, role: str) -> Path:
    """`path` against `cwd`; with a workspace, it must lie inside it (symlinks resolved)."""
    if not isinstance(path, str | os.PathLike) or not os.fspath(path).strip():
        raise BatchError(f"the {role} path is empty")
    full = Path(os.path.realpath(cwd / path))
    if workspace is not None and not full.is_relative_to(os.path.realpath(workspace)):
        raise BatchError(f"{role} {path} is outside the workspace {workspace}")
    return full


def plan(
    home: Path, session_type: str, input_path: str | os.PathLike[str], prompt: str,
    output_path: str | os.PathLike[str], *, max_concurrency: int = 16,
    budget: Budget | None = None, cwd: Path, workspace: Path | None = None,
    replace: bool = True, options: dict[str, Any] | None = None,
    output_schema: dict[str, Any] | None = None, fork_turns: int | str | None = None,
) -> Batch:
    """A new batch, checked whole; nothing runs and nothing is written on a refusal. With a
    workspace, the engine's home is off limits to the output, as to every write of the
    sandbox; without `replace`, so is an existing file. `options` (a CLI batch's model
    options, never a key) are kept in the journal for `--resume`."""
    if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or (
            max_concurrency < 1):
        raise BatchError("max_concurrency must be a whole number of at least 1")
    source = resolve(input_path, cwd, workspace, "input")
    target = resolve(output_path, cwd, workspace, "output")
    template = Template.parse(prompt)
    output_format = format_of(target, "output")
    if target == source:
        raise BatchError(f"output {output_path} is the input itself; name another file")
    if not target.parent.is_dir():
        raise BatchError(f"output {output_path}: folder {target.parent} does not exist")
    if workspace is not None and target.is_relative_to(os.path.realpath(home)):
        raise BatchError(f"output {output_path} is in the engine's home {home}, which stays "
                         "read-only in the sandbox")
    if not replace and os.path.lexists(target):
        raise BatchError(f"output {output_path} exists already; name another file, or pass "
                         "--force to replace it")
    output_schema = check_output_schema(output_schema, "run_batch")
    scanned = scan(source)
    _check_fields(scanned, template)
    output = Output.plan(target, output_format, scanned.columns or template.fields,
                         output_schema)
    header = {"batch_id": new_session_id(), "session_type": session_type,
              "input_path": str(source), "input_sha256": scanned.sha256,
              "total": scanned.total, "prompt": prompt, "output_path": str(target),
              "max_concurrency": max_concurrency,
              "budget": None if budget is None else budget.as_dict(),
              "options": dict(options or {}), "output_schema": output_schema,
              "fork_turns": fork_turns}
    journal = Journal.create(home, header)
    return Batch(journal, scanned, template, output, session_type, max_concurrency, budget,
                 output_schema=output_schema, fork_turns=fork_turns)


def reopen(home: Path, batch_id: str, *, max_concurrency: int | None = None,
           budget: Budget | None = None) -> Batch:
    """A batch to resume: its journal's options, with new limits where given. Its input
    must be the very file it was made from. Nothing is written to the journal until the
    batch runs, so a refusal made after this one leaves it as it was too."""
    journal = Journal.open(home, batch_id)
    try:
        header = journal.header
        source = Path(header["input_path"])
        starts = bytearray()
        scanned = scan(source, starts)
        if scanned.sha256 != header["input_sha256"]:
            raise BatchError(f"batch {batch_id} was made from another {source} (its SHA-256 "
                             "differs); start a new batch for this input")
        journal.load(starts, scanned.total)
        template = Template.parse(header["prompt"])
        target = Path(header["output_path"])
        try:
            output_schema = check_output_schema(header.get("output_schema"), "run_batch")
            fork_turns = fork_turns_of(header.get("fork_turns"), "run_batch")
        except InvalidArguments as exc:
            raise journal.damaged(1, f"its {exc.problem.split(':')[0]} is refused "
                                  f"({exc.problem})") from None
        output = Output.plan(target, format_of(target, "output"),
                             scanned.columns or template.fields, output_schema)
        concurrency = int(header["max_concurrency"]) if max_concurrency is None else (
            max_concurrency)
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise BatchError("max_concurrency must be a whole number of at least 1")
        if budget is None and header["budget"] is not None:
            budget = Budget(**header["budget"])
    except BaseException:
        journal.close()
        raise
    return Batch(journal, scanned, template, output, str(header["session_type"]), concurrency,
                 budget, resuming=True, output_schema=output_schema, fork_turns=fork_turns)


def _check_fields(scanned: Scan, template: Template) -> None:
    """A CSV's header is known: a field it lacks refuses the batch. (A JSONL item lacking
    one fails alone.)"""
    if scanned.columns is None:
        return
    for name in template.fields:
        if name not in scanned.columns:
            raise BatchError(f"the prompt names field {{{name}}}, but input {scanned.path} has "
                             f"no such column (it has: {', '.join(scanned.columns)})")
