"""`read_file`, `list_dir`, and the `builtin_tools` factory."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path
from typing import Any

import pytest
from swap_support import swapping
from tools_support import ws

from subsessions.config import Invocation, Tool
from subsessions.errors import InvalidArguments
from subsessions.tools import BUILTIN_TOOL_NAMES, FileToolError, ToolContext, builtin_tools, files

__all__ = ["ws"]  # the fixture, imported so that pytest finds it here

CALL = Invocation(session_id="s", tool_call_id="call_1", tool_name="read_file")


async def call(ws: Path, name: str, **arguments: Any) -> str:
    (tool,) = builtin_tools(ToolContext(cwd=str(ws)), [name])
    assert tool.handler is not None
    result: str = await tool.handler(arguments, CALL)
    return result


# -- read_file ----------------------------------------------------------------------------


async def test_numbered_lines(ws: Path) -> None:
    (ws / "a.py").write_text("first\n\tsecond\nthird")
    assert await call(ws, "read_file", path="a.py") == (
        "     1\tfirst\n     2\t\tsecond\n     3\tthird\n"
    )


async def test_offset_and_limit(ws: Path) -> None:
    (ws / "n.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    out = await call(ws, "read_file", path="n.txt", offset=3, limit=2)
    assert out == "     3\tline 3\n     4\tline 4\n[... more lines; read on with offset=5]\n"
    out = await call(ws, "read_file", path="n.txt", offset=9)
    assert out == "     9\tline 9\n    10\tline 10\n"
    with pytest.raises(FileToolError, match=r"offset 20 is past the end of n\.txt \(10 lines\)"):
        await call(ws, "read_file", path="n.txt", offset=20)


async def test_default_limit_bounds_the_output(ws: Path) -> None:
    (ws / "big.txt").write_text("x\n" * 5000)
    out = await call(ws, "read_file", path="big.txt")
    lines = out.splitlines()
    assert len(lines) == files.DEFAULT_LINES + 1
    assert lines[-1] == f"[... more lines; read on with offset={files.DEFAULT_LINES + 1}]"
    out = await call(ws, "read_file", path="big.txt", limit=10**9)  # clamped
    assert len(out.splitlines()) == files.MAX_LINES if files.MAX_LINES < 5000 else 5000


async def test_long_lines_are_cut(ws: Path) -> None:
    (ws / "long.txt").write_text("a" * 100_000 + "\nshort\n" + "b" * 3000)
    out = await call(ws, "read_file", path="long.txt")
    first, second, third = out.splitlines()
    cut = 100_000 - files.MAX_LINE_CHARS
    assert first == "     1\t" + "a" * files.MAX_LINE_CHARS + f" [... line cut: {cut} more]"
    assert second == "     2\tshort"
    assert third == "     3\t" + "b" * files.MAX_LINE_CHARS + " [... line cut: 2500 more]"


async def test_huge_single_line_file_is_bounded(ws: Path) -> None:
    (ws / "one.txt").write_bytes(b"z" * 30_000_000)
    out = await call(ws, "read_file", path="one.txt")
    assert len(out) < 1000
    assert out.endswith(f" [... line cut: {30_000_000 - 500} more]\n")


async def test_read_errors(ws: Path) -> None:
    (ws / "d").mkdir()
    (ws / "bin").write_bytes(b"\x7fELF\x00\x01\x02")
    (ws / "empty").write_text("")
    with pytest.raises(FileToolError, match=r"read_file: nope\.txt does not exist"):
        await call(ws, "read_file", path="nope.txt")
    with pytest.raises(FileToolError, match="read_file: d is a directory; use list_dir"):
        await call(ws, "read_file", path="d")
    with pytest.raises(FileToolError, match=r"read_file: bin looks like a binary file \(7 bytes\)"):
        await call(ws, "read_file", path="bin")
    assert await call(ws, "read_file", path="empty") == "(empty is empty)"
    with pytest.raises(FileToolError, match="does not exist"):
        await call(ws, "read_file", path="empty/child")


async def test_special_files_are_not_read(ws: Path) -> None:
    os.mkfifo(ws / "fifo")
    async with asyncio.timeout(5):  # a FIFO with no writer would block forever
        with pytest.raises(FileToolError, match="fifo is not a regular file"):
            await call(ws, "read_file", path="fifo")
        with pytest.raises(FileToolError, match="not a regular file"):
            await call(ws, "read_file", path="/dev/zero")


async def test_reads_are_not_confined_to_the_workspace(ws: Path) -> None:
    (ws.parent / "elsewhere.txt").write_text("visible\n")
    assert await call(ws, "read_file", path="../elsewhere.txt") == "     1\tvisible\n"


async def test_invalid_read_arguments(ws: Path) -> None:
    (ws / "a").write_text("x\n")
    for arguments, message in (
        ({}, "missing required field path"),
        ({"path": "a", "offset": 0}, "offset must be at least 1"),
        ({"path": "a", "limit": -1}, "limit must be at least 1"),
        ({"path": "a", "limit": "5"}, "limit must be an integer"),
        ({"path": "a", "lines": 5}, "unexpected field lines"),
    ):
        with pytest.raises(InvalidArguments, match="invalid arguments for read_file: " + message):
            await call(ws, "read_file", **arguments)
    assert await call(ws, "read_file", path="a", offset=None, limit=None) == "     1\tx\n"


# -- list_dir -----------------------------------------------------------------------------


def make_tree(ws: Path) -> None:
    (ws / "src" / "pkg" / "deep").mkdir(parents=True)
    (ws / "src" / "pkg" / "__init__.py").write_text("")
    (ws / "src" / "pkg" / "deep" / "x.py").write_text("x = 1\n")
    (ws / "src" / "main.py").write_text("print('hi')\n")
    (ws / "README.md").write_text("# readme\n")
    (ws / "link").symlink_to(ws / "src")


async def test_list_dir_with_sizes_and_depth(ws: Path) -> None:
    make_tree(ws)
    out = await call(ws, "list_dir", path=".")
    assert out == (
        f"{ws}/\n"
        "README.md  9 B\n"
        "link -> " + str(ws / "src") + "\n"
        "src/\n"
        "  main.py  12 B\n"
        "  pkg/\n"
    )
    out = await call(ws, "list_dir", path="src", depth=5)
    assert out == (
        f"{ws}/src/\n"
        "main.py  12 B\n"
        "pkg/\n"
        "  __init__.py  0 B\n"
        "  deep/\n"
        "    x.py  6 B\n"
    )
    out = await call(ws, "list_dir", path="src", depth=1)
    assert out == f"{ws}/src/\nmain.py  12 B\npkg/\n"


async def test_list_dir_is_bounded(ws: Path) -> None:
    for i in range(30):
        (ws / f"f{i:02}").write_text("")
    (ws / "zdir").mkdir()
    for i in range(30):
        (ws / "zdir" / f"g{i:02}").write_text("")
    out = await call(ws, "list_dir", path=".", limit=10)
    lines = out.splitlines()
    assert lines[1:11] == [f"f{i:02}  0 B" for i in range(10)]
    assert lines[-1] == "[... 21 more entries not shown; raise limit or list a subdirectory]"
    # breadth first: the top level comes before what is below it
    out = await call(ws, "list_dir", path=".", limit=35)
    assert "zdir/" in out
    assert "  g03  0 B" in out  # 31 entries above it, then 4 of its own
    assert "  g04  0 B" not in out


async def test_list_dir_errors(ws: Path) -> None:
    (ws / "f.txt").write_text("x")
    (ws / "empty").mkdir()
    with pytest.raises(FileToolError, match="list_dir: nope does not exist"):
        await call(ws, "list_dir", path="nope")
    with pytest.raises(FileToolError, match=r"list_dir: f\.txt is not a directory; use read_file"):
        await call(ws, "list_dir", path="f.txt")
    assert await call(ws, "list_dir", path="empty") == f"{ws}/empty/\n(empty directory)\n"
    with pytest.raises(InvalidArguments, match="depth must be at least 1"):
        await call(ws, "list_dir", path=".", depth=0)


async def test_list_dir_special_entries_and_symlink_loops(ws: Path) -> None:
    os.mkfifo(ws / "fifo")
    (ws / "loop").symlink_to(ws)
    (ws / "dangling").symlink_to(ws / "missing")
    out = await call(ws, "list_dir", path=".", depth=10)
    assert out == (
        f"{ws}/\n"
        "dangling -> " + str(ws / "missing") + "\n"
        "fifo  [special file]\n"
        "loop -> " + str(ws) + "\n"
    )


# -- the factory --------------------------------------------------------------------------


def test_builtin_tools(ws: Path) -> None:
    tools = builtin_tools(ToolContext(cwd=str(ws)))
    assert tuple(t.name for t in tools) == BUILTIN_TOOL_NAMES
    assert BUILTIN_TOOL_NAMES == ("shell", "apply_patch", "read_file", "list_dir")
    for tool in tools:
        assert isinstance(tool, Tool)
        assert tool.handler is not None
        assert tool.description
        assert tool.parameters["type"] == "object"
        assert tool.parameters["additionalProperties"] is False
        assert set(tool.parameters["required"]) <= set(tool.parameters["properties"])
        assert tool.spec()["name"] == tool.name
    assert [t.name for t in builtin_tools(ToolContext(cwd=str(ws)), ["read_file", "shell"])] == [
        "read_file", "shell"
    ]
    assert builtin_tools(ToolContext(cwd=str(ws)), []) == ()
    with pytest.raises(ValueError, match="unknown built-in tool 'bash'; expected one of: shell, "
                       "apply_patch, read_file, list_dir"):
        builtin_tools(ToolContext(cwd=str(ws)), ["shell", "bash"])


# -- races: what is checked is what is read ------------------------------------------------


async def test_a_file_swapped_for_a_fifo_is_refused_never_opened(ws: Path) -> None:
    """Opening a FIFO with no writer blocks forever: read_file must look before it opens."""
    (ws / "f.txt").write_text("text\n")
    os.mkfifo(ws / "alt")
    seen: set[str] = set()
    try:
        async with swapping(ws, "f.txt", "alt"):
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline:
                try:
                    out = await asyncio.wait_for(call(ws, "read_file", path="f.txt"), 10)
                except FileToolError as exc:
                    assert str(exc) == "read_file: f.txt is not a regular file"
                    seen.add("refused")
                else:
                    assert out == "     1\ttext\n"
                    seen.add("read")
    finally:
        for name in ("f.txt", "alt"):  # release a reader an unsafe open left blocked
            with contextlib.suppress(OSError):
                os.close(os.open(ws / name, os.O_WRONLY | os.O_NONBLOCK))
    assert seen == {"read", "refused"}


async def test_list_dir_never_descends_into_a_directory_swapped_for_a_symlink(
    ws: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s")
    (ws / "sub").mkdir()
    (ws / "sub" / "mine.txt").write_text("m")
    (ws / "alt").symlink_to(outside)
    listed = 0
    async with swapping(ws, "sub", "alt"):  # the real directory is under either name
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            out = await call(ws, "list_dir", path=".")
            assert "secret.txt" not in out, out
            listed += "\n  mine.txt  1 B\n" in out
    assert listed > 0
