"""`apply_patch`: add, update, move and delete files, all or nothing.

The patch is parsed whole, every path is resolved (symlinks, `..`) and checked against
the sandbox, and every hunk is matched against the files' current contents (files touched
twice see the earlier change) before anything is written. Then each new content goes to a
temporary file beside its target and all are renamed into place; if any step fails, the
files already changed are restored, so a failed patch leaves no file changed.
Success output (Codex's): "Success. Updated the following files:" then `A path`, `M path`,
`D path` lines.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from typing import Any

from attrs import define, frozen

from subsessions.tools import sandbox
from subsessions.tools.approval import approve_patch
from subsessions.tools.context import ToolContext
from subsessions.tools.errors import FileToolError, PatchConflict
from subsessions.tools.patch import (
    AddFile,
    DeleteFile,
    FileOp,
    UpdateFile,
    apply_hunks,
    parse_patch,
)
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


@frozen
class Change:
    path: str  # resolved
    new: bytes | None  # None: delete
    original: bytes | None  # None: did not exist
    mode: int | None  # the original's permission bits


@define
class _Plan:
    context: ToolContext
    contents: dict[str, str | None]  # resolved path -> final text (None: deleted)
    originals: dict[str, tuple[bytes | None, int | None]]
    modes: dict[str, int]  # a moved file's mode, for its new path
    problems: list[str]
    paths: list[str]  # as written in the patch
    summary: list[str]

    def original(self, path: str, shown: str) -> tuple[bytes | None, int | None]:
        if path not in self.originals:
            try:
                info = os.stat(path)
            except FileNotFoundError:
                self.originals[path] = (None, None)
            except OSError as exc:
                raise FileToolError(f"apply_patch: {shown}: {exc.strerror}") from None
            else:
                if stat.S_ISDIR(info.st_mode):
                    raise FileToolError(f"apply_patch: {shown} is a directory")
                if not stat.S_ISREG(info.st_mode):
                    raise FileToolError(f"apply_patch: {shown} is not a regular file")
                try:
                    with open(path, "rb") as handle:
                        data = handle.read()
                except OSError as exc:
                    raise FileToolError(
                        f"apply_patch: cannot read {shown}: {exc.strerror}"
                    ) from None
                self.originals[path] = (data, stat.S_IMODE(info.st_mode))
        return self.originals[path]

    def current(self, path: str, shown: str) -> str | None:
        if path in self.contents:
            return self.contents[path]
        data, _ = self.original(path, shown)
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise FileToolError(f"apply_patch: {shown} is not a UTF-8 text file") from None

    def target(self, shown: str, *, removing: bool = False) -> str:
        """The resolved path; a sandbox objection is recorded, not raised (approval decides)."""
        self.paths.append(shown)
        resolved = sandbox.resolve_for_write(self.context, shown, removing=removing)
        problem = sandbox.write_problem(self.context, resolved)
        if problem is not None:
            where = shown if resolved == shown else f"{shown} ({resolved})"
            self.problems.append(f"writing {where} is not allowed: {problem}")
        return resolved

    def add(self, op: AddFile) -> None:
        path = self.target(op.path)
        self.original(path, op.path)
        self.contents[path] = op.content
        self.summary.append(f"A {op.path}")

    def delete(self, op: DeleteFile) -> None:
        path = self.target(op.path, removing=True)
        self.original(path, op.path)
        if self.current(path, op.path) is None:
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
        mode = self.originals[moved_from][1]
        if mode is not None:
            self.modes[destination] = mode
        self.summary.append(f"M {op.move_to}")

    def changes(self) -> list[Change]:
        found = []
        for path, text in self.contents.items():
            data, mode = self.originals[path]
            new = None if text is None else text.encode("utf-8")
            if new != data:
                found.append(Change(path, new, data, self.modes.get(path, mode)))
        return found


def plan(context: ToolContext, ops: list[FileOp]) -> _Plan:
    result = _Plan(context, {}, {}, {}, [], [], [])
    for op in ops:
        if isinstance(op, AddFile):
            result.add(op)
        elif isinstance(op, DeleteFile):
            result.delete(op)
        else:
            result.update(op)
    return result


async def run_apply_patch(
    context: ToolContext, arguments: dict[str, Any], invocation: Any
) -> str:
    check_arguments(NAME, PARAMETERS, arguments)
    text: str = arguments["patch"]
    ops = parse_patch(text)
    first = plan(context, ops)
    if first.problems or context.approval == "untrusted":
        await approve_patch(
            context, text, list(dict.fromkeys(first.paths)), first.problems,
            getattr(invocation, "tool_call_id", None),
        )
        first = plan(context, ops)  # the files may have changed while the user decided
    commit(first.changes())
    return "Success. Updated the following files:\n" + "\n".join(first.summary) + "\n"


def commit(changes: list[Change]) -> None:
    """Write every change or none (restoring what was already changed on a failure)."""
    temps: dict[str, str] = {}
    made: list[str] = []
    try:
        for change in changes:
            if change.new is not None:
                temps[change.path] = _write_temp(change, made)
    except OSError as exc:
        _discard(temps, made)
        raise FileToolError(
            f"apply_patch: cannot write {exc.filename or 'a file'}: {exc.strerror}; "
            "no file was changed"
        ) from None
    done: list[Change] = []
    try:
        for change in changes:
            if change.new is None:
                os.unlink(change.path)
            else:
                os.replace(temps[change.path], change.path)
                del temps[change.path]
            done.append(change)
    except OSError as exc:
        for change in reversed(done):
            _restore(change)
        _discard(temps, made)
        raise FileToolError(
            f"apply_patch: cannot change {exc.filename or 'a file'}: {exc.strerror}; "
            "the files changed before it were restored"
        ) from None


def _write_temp(change: Change, made: list[str]) -> str:
    assert change.new is not None
    parent, name = os.path.split(change.path)
    missing = []
    walk = parent
    while not os.path.isdir(walk):
        missing.append(walk)
        walk = os.path.dirname(walk)
    for directory in reversed(missing):
        os.mkdir(directory)
        made.append(directory)
    temp = os.path.join(parent, f".{name}.{secrets.token_hex(4)}.apply_patch")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(change.new)
        if change.mode is not None:
            os.chmod(temp, change.mode)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    return temp


def _discard(temps: dict[str, str], made: list[str]) -> None:
    for temp in temps.values():
        with contextlib.suppress(OSError):
            os.unlink(temp)
    for directory in reversed(made):
        with contextlib.suppress(OSError):
            os.rmdir(directory)


def _restore(change: Change) -> None:
    with contextlib.suppress(OSError):
        if change.original is None:
            os.unlink(change.path)
            return
        with open(change.path, "wb") as handle:
            handle.write(change.original)
        if change.mode is not None:
            os.chmod(change.path, change.mode)
