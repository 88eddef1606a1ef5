"""The apply_patch format Codex models are trained on: parsing and matching hunks.

    *** Begin Patch
    *** Add File: path            then the file's lines, each prefixed by "+"
    *** Delete File: path
    *** Update File: path
    *** Move to: new/path         optional, right after Update File
    @@ optional context line      then hunk lines: " " context, "-" removed, "+" added
    *** End of File               optional: the hunk must match at the end of the file
    *** End Patch

Lenient where Codex is: a heredoc wrapper (`<<'EOF'` ... `EOF`) is stripped, the first
hunk of an Update may omit `@@`, an empty line inside a hunk is an empty context line,
and hunks match first exactly, then ignoring trailing whitespace, then ignoring
surrounding whitespace, then with typographic punctuation folded to ASCII. A unified-diff
header (`@@ -1,3 +1,4 @@`) carries no context. A hunk with only "+" lines goes right after
its `@@` context line, or at the end of the file without one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from attrs import frozen

from subsessions.tools.errors import PatchConflict, PatchSyntaxError

BEGIN = "*** Begin Patch"
END = "*** End Patch"
ADD = "*** Add File: "
DELETE = "*** Delete File: "
UPDATE = "*** Update File: "
MOVE = "*** Move to: "
END_OF_FILE = "*** End of File"
_HEREDOC = re.compile(r"""^(?:apply_patch\s*)?<<-?\s*['"]?(\w+)['"]?\s*$""")
_UNIFIED = re.compile(r"^-\d+(,\d+)? \+\d+(,\d+)? @@")
_PUNCTUATION = str.maketrans({
    "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-", "\u2015": "-",
    "\u2212": "-", "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u201c": '"',
    "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u00a0": " ", "\u2002": " ", "\u2003": " ",
    "\u2009": " ", "\u202f": " ",
})
_SHOWN_LINES = 20


@frozen
class Hunk:
    context: str | None
    lines: tuple[tuple[str, str], ...]  # (" " | "-" | "+", text)
    end_of_file: bool
    line: int  # where it starts in the patch (1-based)

    @property
    def old(self) -> tuple[str, ...]:
        return tuple(text for kind, text in self.lines if kind != "+")

    @property
    def new(self) -> tuple[str, ...]:
        return tuple(text for kind, text in self.lines if kind != "-")


@frozen
class AddFile:
    path: str
    content: str
    line: int


@frozen
class DeleteFile:
    path: str
    line: int


@frozen
class UpdateFile:
    path: str
    move_to: str | None
    hunks: tuple[Hunk, ...]
    line: int


FileOp = AddFile | DeleteFile | UpdateFile


def parse_patch(text: str) -> list[FileOp]:
    """Every operation of the patch, or `PatchSyntaxError` naming the line."""
    lines = [line.removesuffix("\r") for line in text.strip().split("\n")]
    first = 1
    heredoc = _HEREDOC.match(lines[0].strip())
    if heredoc and len(lines) >= 2 and lines[-1].strip() == heredoc.group(1):
        lines, first = lines[1:-1], 2
    if not lines or lines[0].strip() != BEGIN:
        raise PatchSyntaxError(first, f"the first line must be {BEGIN!r}")
    if len(lines) < 2 or lines[-1].strip() != END:
        raise PatchSyntaxError(first + len(lines) - 1, f"the last line must be {END!r}")
    parser = _Parser(lines, first)
    ops = parser.parse()
    if not ops:
        raise PatchSyntaxError(first, "the patch changes no file")
    return ops


class _Parser:
    def __init__(self, lines: list[str], first: int) -> None:
        self.lines = lines
        self.first = first  # the patch's line number of lines[0]
        self.end = len(lines) - 1  # index of *** End Patch
        self.i = 1

    def number(self, index: int) -> int:
        return self.first + index

    def parse(self) -> list[FileOp]:
        ops: list[FileOp] = []
        while self.i < self.end:
            line = self.lines[self.i]
            start = self.number(self.i)
            if not line.strip():
                self.i += 1
            elif line.startswith(ADD):
                path = self.path(line, ADD)
                self.i += 1
                content = []
                while self.i < self.end and self.lines[self.i].startswith("+"):
                    content.append(self.lines[self.i][1:] + "\n")
                    self.i += 1
                ops.append(AddFile(path, "".join(content), start))
            elif line.startswith(DELETE):
                ops.append(DeleteFile(self.path(line, DELETE), start))
                self.i += 1
            elif line.startswith(UPDATE):
                ops.append(self.update(self.path(line, UPDATE), start))
            else:
                raise PatchSyntaxError(
                    start,
                    f"expected {ADD.strip()!r}, {UPDATE.strip()!r} or {DELETE.strip()!r}, "
                    f"got {_short(line)!r}",
                )
        return ops

    def path(self, line: str, prefix: str) -> str:
        path = line[len(prefix):].strip()
        if not path:
            raise PatchSyntaxError(self.number(self.i), f"{prefix.strip()!r} without a path")
        return path

    def update(self, path: str, start: int) -> UpdateFile:
        self.i += 1
        move_to = None
        if self.i < self.end and self.lines[self.i].startswith(MOVE):
            move_to = self.path(self.lines[self.i], MOVE)
            self.i += 1
        hunks: list[Hunk] = []
        while self.i < self.end:
            line = self.lines[self.i]
            if not line.strip():
                self.i += 1
            elif line.startswith("***"):
                break
            else:
                hunks.append(self.hunk(first=not hunks))
        if not hunks:
            raise PatchSyntaxError(start, f"'Update File: {path}' has no hunks")
        return UpdateFile(path, move_to, tuple(hunks), start)

    def hunk(self, *, first: bool) -> Hunk:
        start = self.number(self.i)
        line = self.lines[self.i]
        context: str | None = None
        if line.startswith("@@"):
            header = line[2:].strip()
            context = None if not header or _UNIFIED.match(header) else header
            self.i += 1
        elif not first:
            raise PatchSyntaxError(
                start, f"expected a hunk starting with '@@', got {_short(line)!r}"
            )
        lines: list[tuple[str, str]] = []
        count = 0
        end_of_file = False
        while self.i < self.end:
            line = self.lines[self.i]
            if line.strip() == END_OF_FILE:
                end_of_file = True
                self.i += 1
                break
            if line == "":
                lines.append((" ", ""))
            elif line[0] in " -+":
                lines.append((line[0], line[1:]))
            elif count == 0:
                raise PatchSyntaxError(
                    self.number(self.i),
                    f"unexpected line in a hunk: {_short(line)!r}; every hunk line starts with "
                    "' ' (context), '-' (removed) or '+' (added)",
                )
            else:
                break
            count += 1
            self.i += 1
        if count == 0:
            raise PatchSyntaxError(start, "a hunk with no lines")
        return Hunk(context, tuple(lines), end_of_file, start)


def _short(text: str) -> str:
    return text if len(text) <= 80 else text[:80] + "…"


_FOLDS: tuple[Callable[[str], str], ...] = (
    lambda s: s,
    str.rstrip,
    str.strip,
    lambda s: s.translate(_PUNCTUATION).strip(),
)


def _seek(lines: list[str], pattern: Sequence[str], start: int, end_of_file: bool) -> int | None:
    if len(pattern) > len(lines):
        return None
    last = len(lines) - len(pattern)
    starts = [last] if end_of_file else range(start, last + 1)
    for fold in _FOLDS:
        wanted = [fold(p) for p in pattern]
        for at in starts:
            if all(fold(lines[at + k]) == wanted[k] for k in range(len(wanted))):
                return at
    return None


def _replacement(changes: list[tuple[str, str]], lines: list[str], at: int) -> list[str]:
    """The hunk's new lines; context lines keep the file's text (it may differ in spacing)."""
    out = []
    for kind, text in changes:
        if kind == " ":
            out.append(lines[at])
        if kind != "+":
            at += 1
        else:
            out.append(text)
    return out


def apply_hunks(label: str, content: str, hunks: Sequence[Hunk]) -> str:
    """`content` with every hunk applied, or `PatchConflict` naming the hunk that failed."""
    crlf = "\r\n" in content
    lines = content.split("\n")
    if lines[-1] == "":
        lines.pop()
    if crlf:
        lines = [line.removesuffix("\r") for line in lines]
    edits: list[tuple[int, int, int, list[str]]] = []  # start, order, length, new lines
    index = 0
    for number, hunk in enumerate(hunks, 1):
        where = f"hunk {number} (patch line {hunk.line})"
        if hunk.context is not None:
            found = _seek(lines, [hunk.context], index, False)
            if found is None:
                raise PatchConflict(label, f"{where}: context line {hunk.context!r} not found")
            index = found + 1
        changes = list(hunk.lines)
        old = [text for kind, text in changes if kind != "+"]
        if not old:
            at = index if hunk.context is not None else len(lines)
            edits.append((at, number, 0, [text for _, text in changes]))
            index = at
            continue
        found = _seek(lines, old, index, hunk.end_of_file)
        if found is None and changes[-1] == (" ", ""):  # a trailing empty line the model added
            changes.pop()
            old.pop()
            found = _seek(lines, old, index, hunk.end_of_file) if old else index
        if found is None:
            shown = "\n".join(old[:_SHOWN_LINES])
            more = f"\n[... {len(old) - _SHOWN_LINES} more]" if len(old) > _SHOWN_LINES else ""
            at_end = " at the end of the file" if hunk.end_of_file else ""
            raise PatchConflict(
                label, f"{where} did not match; expected these lines{at_end}:\n{shown}{more}"
            )
        edits.append((found, number, len(old), _replacement(changes, lines, found)))
        index = found + len(old)
    for start, _order, length, new in sorted(edits, reverse=True):
        lines[start:start + length] = new
    if not lines:
        return ""
    newline = "\r\n" if crlf else "\n"
    return newline.join(lines) + newline
