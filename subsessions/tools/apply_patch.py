"""`apply_patch`: add, update, move and delete files, all or nothing.

The patch is parsed whole, every path is resolved (symlinks, `..`) and checked against
the sandbox, and every hunk is matched against the files' current contents (files touched
twice see the earlier change) before anything is written; then `patch_commit` writes it
all or nothing. Success output (Codex's): "Success. Updated the following files:" then
`A path`, `M path`, `D path` lines.

Symlinks are followed as the kernel would (Codex runs its apply_patch inside the sandbox,
so a symlink inside the workspace to a file inside it edits that file, and one pointing
outside the writable roots is refused). The resolved path is what is checked, and what is
written: files are read and written through `beneath.DirHandles`, which opens the
resolved path one directory at a time without following symlinks, so a directory that a
concurrent process swaps for a symlink after the check fails the patch with a clear error
instead of redirecting the write. After an approval the plan is made again, and a path
that now resolves to an unapproved place outside the writable roots is refused.

Parsing, planning and writing run in a worker thread: a patch of thousands of files does
not stall the other sessions. If the tool call is cancelled, the worker stops at its next
step (before the first rename: no file changed) or finishes its renames, and only then is
the cancellation passed on.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import threading
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from attrs import Factory, define

from subsessions.tools import sandbox
from subsessions.tools.approval import approve_patch
from subsessions.tools.beneath import DirHandles, PathChanged, lstat_at, read_at
from subsessions.tools.context import ToolContext
from subsessions.tools.errors import FileToolError, PatchConflict, WriteNotAllowed
from subsessions.tools.patch import (
    AddFile,
    DeleteFile,
    FileOp,
    UpdateFile,
    apply_hunks,
    parse_patch,
)
from subsessions.tools.patch_commit import Change, Original, Stopped, commit
from subsessions.tools.schema import check_arguments

NAME = "apply_patch"
FORMAT = """\
Edit files with a patch in this format (paths relative to the workspace):

*** Begin Patch
*** Add File: path/new.py
+line 1 of the new file
+line 2
*** Update File: path/old.py
*** Move to: path/renamed.py   (optional)
@@ def function_or_class_the_hunk_is_in():
 context line (starts with a space; give ~3 lines before and after each change)
-removed line
+added line
*** Delete File: path/unused.py
*** End Patch

Each @@ hunk lists the current lines exactly (' ' kept, '-' removed) and the new ones
('+'). The patch applies entirely or not at all; a hunk that does not match is reported
with its file and number."""

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"patch": {"type": "string", "description": "The whole patch text."}},
    "required": ["patch"],
    "additionalProperties": False,
}


T = TypeVar("T")


@define
class _Plan:
    context: ToolContext
    handles: DirHandles
    approved: frozenset[str]  # resolved paths outside the sandbox the user approved
    stop: threading.Event
    contents: dict[str, str | None] = Factory(dict)  # resolved -> final text (None: deleted)
    originals: dict[str, Original] = Factory(dict)
    modes: dict[str, int] = Factory(dict)  # a moved file's mode, for its new path
    shown: dict[str, str] = Factory(dict)  # resolved -> as first written in the patch
    problems: list[str] = Factory(list)
    outside: list[str] = Factory(list)  # the resolved paths the problems are about
    paths: list[str] = Factory(list)  # as written in the patch
    summary: list[str] = Factory(list)

    roots: list[str] = Factory(list)  # the writable roots, taken once per plan
    protected: list[str] = Factory(list)

    def __attrs_post_init__(self) -> None:
        self.roots = sandbox.writable_roots(self.context)
        self.protected = sandbox.read_only_subpaths(self.roots, self.context)

    def problem(self, resolved: str) -> str | None:
        if resolved in self.approved:
            return None
        if _beneath_any(resolved, self.roots) and not _beneath_any(resolved, self.protected):
            return None  # the common case, without computing the roots again
        return sandbox.write_problem(self.context, resolved)

    def check(self, resolved: str) -> None:
        """Raise unless `resolved` may be written (again, right before writing it); a missing
        directory above an approved path may be made."""
        if any(path.startswith(resolved + "/") for path in self.approved):
            return
        problem = self.problem(resolved)
        if problem is not None:
            raise WriteNotAllowed(_where(self.shown.get(resolved, resolved), resolved), problem)

    def original(self, path: str, shown: str) -> Original:
        if path not in self.originals:
            self.originals[path] = self._read(path, shown)
        return self.originals[path]

    def _read(self, path: str, shown: str) -> Original:
        parent, name = os.path.split(path)
        try:
            fd = self.handles.directory(parent)
            info = lstat_at(fd, name)
            if info is None:
                return Original(None, None)
            if stat.S_ISLNK(info.st_mode):  # only a path to remove is left unresolved
                return Original(None, None, os.readlink(name, dir_fd=fd))
            if stat.S_ISDIR(info.st_mode):
                raise FileToolError(f"apply_patch: {shown} is a directory")
            if not stat.S_ISREG(info.st_mode):
                raise FileToolError(f"apply_patch: {shown} is not a regular file")
            data, info = read_at(fd, name)
        except FileNotFoundError:
            return Original(None, None)
        except PathChanged as exc:
            raise FileToolError(f"apply_patch: cannot read {shown}: {exc}") from None
        except OSError as exc:
            raise FileToolError(f"apply_patch: cannot read {shown}: {exc.strerror}") from None
        return Original(data, stat.S_IMODE(info.st_mode))

    def current(self, path: str, shown: str) -> str | None:
        if path in self.contents:
            return self.contents[path]
        data = self.original(path, shown).data
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise FileToolError(f"apply_patch: {shown} is not a UTF-8 text file") from None

    def target(self, shown: str, *, removing: bool = False) -> str:
        """The resolved path; a sandbox objection is recorded, not raised (approval decides)."""
        if self.stop.is_set():
            raise Stopped
        self.paths.append(shown)
        try:
            resolved = sandbox.resolve_for_write(self.context, shown, removing=removing)
        except OSError as exc:  # realpath raced with a change of a symlink on the path
            raise FileToolError(
                f"apply_patch: cannot resolve {shown}: {exc.strerror}; no file was changed"
            ) from None
        self.shown.setdefault(resolved, shown)
        problem = self.problem(resolved)
        if problem is not None:
            self.problems.append(f"writing {_where(shown, resolved)} is not allowed: {problem}")
            self.outside.append(resolved)
        return resolved

    def add(self, op: AddFile) -> None:
        path = self.target(op.path)
        self.original(path, op.path)
        self.contents[path] = op.content
        self.summary.append(f"A {op.path}")

    def delete(self, op: DeleteFile) -> None:
        path = self.target(op.path, removing=True)
        original = self.original(path, op.path)
        if path in self.contents:
            exists = self.contents[path] is not None
        else:
            exists = original.link is not None or self.current(path, op.path) is not None
        if not exists:
            raise PatchConflict(op.path, "Delete File: the file does not exist")
        self.contents[path] = None
        self.summary.append(f"D {op.path}")

    def update(self, op: UpdateFile) -> None:
        source = self.target(op.path)
        text = self.current(source, op.path)
        if text is None:
            raise PatchConflict(op.path, "Update File: the file does not exist")
        new = apply_hunks(op.path, text, op.hunks)
        if op.move_to is None:
            self.contents[source] = new
            self.summary.append(f"M {op.path}")
            return
        moved_from = self.target(op.path, removing=True)
        self.original(moved_from, op.path)
        destination = self.target(op.move_to)
        self.original(destination, op.move_to)
        self.contents[moved_from] = None
        self.contents[destination] = new
        mode = self.originals[source].mode
        if mode is not None:
            self.modes[destination] = mode
        self.summary.append(f"M {op.move_to}")

    def changes(self) -> list[Change]:
        found = []
        for path, text in self.contents.items():
            original = self.originals[path]
            new = None if text is None else text.encode("utf-8")
            if new != original.data or original.link is not None:
                mode = self.modes.get(path, original.mode)
                found.append(Change(path, self.shown[path], new, original, mode))
        return found


def _beneath_any(path: str, directories: list[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in directories)


def _where(shown: str, resolved: str) -> str:
    return shown if resolved == shown else f"{shown} ({resolved})"


def _attempt(
    context: ToolContext, patch: str | list[FileOp], approved: frozenset[str], ask: bool,
    stop: threading.Event,
) -> tuple[list[FileOp], _Plan, bool]:
    """Parse and plan; then write it, unless a question must be asked first (False)."""
    ops = parse_patch(patch) if isinstance(patch, str) else patch
    with DirHandles() as handles:
        plan = _Plan(context, handles, approved, stop)
        for op in ops:
            if isinstance(op, AddFile):
                plan.add(op)
            elif isinstance(op, DeleteFile):
                plan.delete(op)
            else:
                plan.update(op)
        if plan.problems or ask:
            return ops, plan, False
        commit(plan.changes(), handles, plan.check, stop)
    return ops, plan, True


async def run_apply_patch(
    context: ToolContext, arguments: dict[str, Any], invocation: Any
) -> str:
    check_arguments(NAME, PARAMETERS, arguments)
    text: str = arguments["patch"]
    ask = context.approval == "untrusted"
    ops, plan, done = await in_thread(partial(_attempt, context, text, frozenset(), ask))
    if not done:
        await approve_patch(
            context, text, list(dict.fromkeys(plan.paths)), plan.problems,
            getattr(invocation, "tool_call_id", None),
        )
        # the files may have changed while the user decided: planned and checked again
        approved = frozenset(plan.outside)
        _, plan, done = await in_thread(partial(_attempt, context, ops, approved, False))
        if not done:
            why = "; ".join(plan.problems)
            raise WriteNotAllowed(
                ", ".join(dict.fromkeys(plan.paths)), why,
                f"apply_patch refused, no file was changed: {why} (it changed while "
                "approval was asked)",
            )
    return "Success. Updated the following files:\n" + "\n".join(plan.summary) + "\n"


async def in_thread(work: Callable[[threading.Event], T]) -> T:
    """`work(stop)` in a worker thread. If the caller is cancelled, `stop` is set and the
    worker is waited for (it stops at its next check) before the cancellation goes on, so
    no thread still writes after the tool call has ended."""
    stop = threading.Event()
    future = asyncio.get_running_loop().run_in_executor(None, work, stop)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        stop.set()
        while not future.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([future])
        if not future.cancelled():
            future.exception()  # seen; the caller gets the cancellation
        raise
