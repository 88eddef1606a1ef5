"""`read_file` and `list_dir`: bounded views of files and directories.

Reads are not confined to the workspace (as in Codex, the sandbox limits writes; a
symlink in the path given is followed), but only regular files are read (no FIFOs or
devices that would block or never end) and every output is bounded: `read_file` shows at
most `limit` lines (default 2000), each cut at `MAX_LINE_CHARS`, and stops at
`MAX_OUTPUT_CHARS`; `list_dir` shows at most `limit` entries (default 500) down to `depth`
levels (default 2) and never follows a symlinked directory. What is checked is what is
read: `read_file` looks at the file through a handle before opening that same file
(`beneath.open_regular`), and `list_dir` descends from the directory's handle, each level
opened with `O_NOFOLLOW`, so a file or directory swapped for a FIFO or a symlink meanwhile
is reported, never opened or followed. The work runs in a thread so a slow disk does not
stall the event loop.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections import deque
from typing import Any, BinaryIO

from subsessions.errors import InvalidArguments
from subsessions.tools.beneath import open_regular
from subsessions.tools.context import ToolContext
from subsessions.tools.errors import FileToolError
from subsessions.tools.schema import check_arguments

READ_FILE = "read_file"
LIST_DIR = "list_dir"
DEFAULT_LINES = 2000
MAX_LINES = 10_000
MAX_LINE_CHARS = 500
MAX_OUTPUT_CHARS = 256 * 1024
DEFAULT_DEPTH = 2
MAX_DEPTH = 10
DEFAULT_ENTRIES = 500
MAX_ENTRIES = 5000
_SNIFF_BYTES = 8192

READ_FILE_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "File path, relative to the workspace."},
        "offset": {"type": "integer", "description": "First line to show (1-based; default 1)."},
        "limit": {
            "type": "integer",
            "description": f"How many lines to show (default {DEFAULT_LINES}, "
            f"at most {MAX_LINES}).",
        },
    },
    "required": ["path"],
    "additionalProperties": False,
}
LIST_DIR_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "Directory, relative to the workspace."},
        "depth": {
            "type": "integer",
            "description": f"Levels to descend (1 = the directory only; default {DEFAULT_DEPTH}, "
            f"at most {MAX_DEPTH}).",
        },
        "limit": {
            "type": "integer",
            "description": f"Most entries to show (default {DEFAULT_ENTRIES}, at most "
            f"{MAX_ENTRIES}).",
        },
    },
    "required": ["path"],
    "additionalProperties": False,
}


def _bounded(tool: str, name: str, value: Any, default: int, highest: int) -> int:
    if value is None:
        return default
    if value < 1:
        raise InvalidArguments(tool, f"{name} must be at least 1, not {value}")
    return min(int(value), highest)


def _path(context: ToolContext, tool: str, arguments: dict[str, Any]) -> str:
    path: str = arguments["path"]
    if "\0" in path:
        raise InvalidArguments(tool, "path must not contain NUL")
    # not normalised: `link/..` must mean what the kernel makes of it
    return os.path.join(context.cwd, os.path.expanduser(path or "."))


# -- read_file ----------------------------------------------------------------------------


async def run_read_file(context: ToolContext, arguments: dict[str, Any], invocation: Any) -> str:
    arguments = {k: v for k, v in arguments.items() if v is not None}
    check_arguments(READ_FILE, READ_FILE_PARAMETERS, arguments)
    path = _path(context, READ_FILE, arguments)
    offset = _bounded(READ_FILE, "offset", arguments.get("offset"), 1, 2**62)
    limit = _bounded(READ_FILE, "limit", arguments.get("limit"), DEFAULT_LINES, MAX_LINES)
    return await asyncio.to_thread(read_file, path, arguments["path"], offset, limit)


def read_file(path: str, shown: str, offset: int, limit: int) -> str:
    try:
        fd, info = open_regular(path)
        if fd is None:
            if stat.S_ISDIR(info.st_mode):
                raise FileToolError(f"read_file: {shown} is a directory; use list_dir")
            raise FileToolError(f"read_file: {shown} is not a regular file")
        with os.fdopen(fd, "rb") as handle:
            if b"\0" in handle.read(_SNIFF_BYTES):
                raise FileToolError(
                    f"read_file: {shown} looks like a binary file ({info.st_size} bytes); "
                    "not shown"
                )
            handle.seek(0)
            return _numbered(handle, shown, offset, limit)
    except FileNotFoundError:
        raise FileToolError(f"read_file: {shown} does not exist") from None
    except NotADirectoryError:
        raise FileToolError(f"read_file: {shown} does not exist (a parent is a file)") from None
    except PermissionError:
        raise FileToolError(f"read_file: permission denied: {shown}") from None


def _line(handle: BinaryIO) -> tuple[bytes, int] | None:
    """The next line (at most the bytes kept) and how many bytes of it were skipped."""
    keep = MAX_LINE_CHARS * 4
    data = handle.readline(keep)
    if not data:
        return None
    skipped = 0
    while not data.endswith(b"\n"):
        rest = handle.readline(65536)
        if not rest:
            break
        skipped += len(rest)
        if rest.endswith(b"\n"):
            skipped -= 1
            data += b"\n"
            break
    return data, skipped


def _numbered(handle: BinaryIO, shown: str, offset: int, limit: int) -> str:
    number = 0
    while number < offset - 1:
        if _line(handle) is None:
            if number == 0:
                return f"({shown} is empty)"
            raise FileToolError(
                f"read_file: offset {offset} is past the end of {shown} ({number} lines)"
            )
        number += 1
    out: list[str] = []
    size = 0
    while True:
        got = _line(handle)
        if got is None:
            break
        if len(out) == limit or size > MAX_OUTPUT_CHARS:
            out.append(f"[... more lines; read on with offset={number + 1}]")
            break
        number += 1
        data, skipped = got
        text = data.decode("utf-8", "replace").rstrip("\r\n")
        if len(text) > MAX_LINE_CHARS or skipped:
            cut = len(text) - MAX_LINE_CHARS + skipped
            text = text[:MAX_LINE_CHARS] + f" [... line cut: {cut} more]"
        entry = f"{number:>6}\t{text}"
        out.append(entry)
        size += len(entry) + 1
    if not out:
        return f"({shown} is empty)"
    return "\n".join(out) + "\n"


# -- list_dir -----------------------------------------------------------------------------


async def run_list_dir(context: ToolContext, arguments: dict[str, Any], invocation: Any) -> str:
    arguments = {k: v for k, v in arguments.items() if v is not None}
    check_arguments(LIST_DIR, LIST_DIR_PARAMETERS, arguments)
    path = _path(context, LIST_DIR, arguments)
    depth = _bounded(LIST_DIR, "depth", arguments.get("depth"), DEFAULT_DEPTH, MAX_DEPTH)
    limit = _bounded(LIST_DIR, "limit", arguments.get("limit"), DEFAULT_ENTRIES, MAX_ENTRIES)
    return await asyncio.to_thread(list_dir, path, arguments["path"], depth, limit)


_SUBDIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _describe(directory: int, name: str) -> tuple[str, bool]:
    """The text shown for an entry and whether to descend into it."""
    try:
        info = os.stat(name, dir_fd=directory, follow_symlinks=False)
        if stat.S_ISLNK(info.st_mode):
            return f"{name} -> {os.readlink(name, dir_fd=directory)}", False
    except OSError as exc:
        return f"{name}  [{exc.strerror}]", False
    if stat.S_ISDIR(info.st_mode):
        return f"{name}/", True
    if stat.S_ISREG(info.st_mode):
        return f"{name}  {info.st_size} B", False
    return f"{name}  [special file]", False


def _scan(top: int, parts: tuple[str, ...]) -> list[tuple[str, str, bool]] | str:
    """(name, text, descend) of each entry of `parts` below `top`, each level opened
    without following a symlink; or why it cannot be listed."""
    opened: list[int] = []
    try:
        directory = top
        for name in parts:
            directory = os.open(name, _SUBDIRECTORY, dir_fd=directory)
            opened.append(directory)
        return [(name, *_describe(directory, name)) for name in sorted(os.listdir(directory))]
    except OSError as exc:
        return exc.strerror or str(exc)
    finally:
        for fd in opened:
            os.close(fd)


def list_dir(path: str, shown: str, depth: int, limit: int) -> str:
    try:
        top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FileToolError(f"list_dir: {shown} does not exist") from None
    except NotADirectoryError:
        raise FileToolError(f"list_dir: {shown} is not a directory; use read_file") from None
    except OSError as exc:
        raise FileToolError(f"list_dir: cannot list {shown}: {exc.strerror}") from None
    try:
        return _listing(top, path, shown, depth, limit)
    finally:
        os.close(top)


def _listing(top: int, path: str, shown: str, depth: int, limit: int) -> str:
    first = _scan(top, ())
    if isinstance(first, str):
        raise FileToolError(f"list_dir: cannot list {shown}: {first}")
    # breadth first, so a deep first subdirectory cannot take the whole budget
    lines: dict[tuple[str, ...], str] = {}
    queue: deque[tuple[tuple[str, ...], list[tuple[str, str, bool]] | str]] = deque(
        [((), first)]
    )
    shown_count = omitted = 0
    while queue:
        parts, entries = queue.popleft()
        if isinstance(entries, str):
            lines[(*parts, "")] = "  " * len(parts) + f"[cannot list: {entries}]"
            continue
        for name, text, descend in entries:
            if shown_count == limit:
                omitted += 1
                continue
            key = (*parts, name)
            lines[key] = "  " * len(parts) + text
            shown_count += 1
            if descend and len(key) < depth:
                queue.append((key, _scan(top, key)))
    out = [f"{os.path.realpath(path)}/"]
    out += [lines[key] for key in sorted(lines)]
    if omitted:
        out.append(f"[... {omitted} more entries not shown; raise limit or list a subdirectory]")
    if not shown_count and not omitted:
        out.append("(empty directory)")
    return "\n".join(out) + "\n"
