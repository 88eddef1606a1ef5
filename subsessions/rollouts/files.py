"""Where rollouts live, and finding one by id or prefix from file names alone.

Names end in the session id (`rollout-<local time>-<uuid>.jsonl`), and uuid7 ids
sort by creation time, so order and lookup need no file to be opened.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import re
import secrets
import stat
import time
from pathlib import Path

from subsessions.errors import RolloutError, UnknownSession, UnsafeHome, echo
from subsessions.ids import id_problem

_ID_LENGTH = 36
_NAME = re.compile(
    r"rollout-[^/]*-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.jsonl"
)
_MAX_CANDIDATES = 10
# A new rollout is written whole under a temporary name first (`RolloutWriter`), where
# no lister looks: `.rollout-...jsonl.<random>.tmp`. One left by a process killed in
# between is removed once it is this old (a write takes microseconds; another host's
# writer on a shared home may still be using a young one).
TEMPORARY_PREFIX = ".rollout-"
TEMPORARY_SUFFIX = ".tmp"
STALE_TEMPORARY_SECONDS = 3600.0

RolloutEntry = tuple[str, str]  # (session id from the name, path)


def secure_home(home: str | os.PathLike[str]) -> None:
    """Make the home and its `sessions/` folder (0700) if missing; refuse them if unsafe.

    Both are made here, before anything is written, so nobody can plant them between
    a check and a write. Only these two are checked, not their parents: a home under
    `/tmp` (sticky, root's) is safe once it is ours, and a parent owned by someone
    else is not ours to judge.
    """
    for folder in (os.fspath(home), os.path.join(home, "sessions")):
        # A home that cannot be made (read-only) fails at the first write, as before.
        with contextlib.suppress(OSError):
            make_private_dirs(folder)
        problem = folder_problem(folder)
        if problem is not None:
            raise UnsafeHome(os.fspath(home), problem)


def folder_problem(folder: str) -> str | None:
    """Why another user could change what is in `folder`; None if nobody but us (or root)
    can, or if it is not there (then nothing can be written into it either)."""
    try:
        info = os.stat(folder)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode):
        return f"{folder} is not a directory"
    uid = os.geteuid()
    if info.st_uid != uid:
        return f"{folder} is owned by uid {info.st_uid}, not by you (uid {uid})"
    if info.st_mode & 0o022:
        return (f"{folder} is writable by other users (mode {info.st_mode & 0o7777:04o}); "
                f"run chmod go-w {folder}")
    return None


def make_private_dirs(folder: str) -> None:
    """Like `os.makedirs`, but every folder it creates is 0700, not only the last one."""
    missing: list[str] = []
    while folder and not os.path.isdir(folder):
        missing.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            if not os.path.isdir(path):
                raise


def rollout_entries(home: str | os.PathLike[str]) -> list[RolloutEntry]:
    """(id, path) of every rollout file under the home, oldest first.

    Only names are read here; a name that is not a rollout's, a symlink or a
    folder fails later, when it is opened (`O_NOFOLLOW`), as "not a rollout".
    """
    found: list[RolloutEntry] = []
    for day in day_folders(home):
        found.extend(folder_entries(day))
    found.sort()
    return found


def day_folders(home: str | os.PathLike[str]) -> list[str]:
    """The `sessions/YYYY/MM/DD` folders of the home (the only places rollouts are made)."""
    return [day for year in _subdirs(os.path.join(home, "sessions"))
            for month in _subdirs(year) for day in _subdirs(month)]


def _subdirs(folder: str) -> list[str]:
    try:
        with os.scandir(folder) as entries:
            return [e.path for e in entries if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def folder_entries(folder: str) -> list[RolloutEntry]:
    """(id, path) of the rollout files in one day folder, by name alone, unsorted."""
    try:
        names = os.listdir(folder)  # much cheaper than scandir for thousands of names
    except OSError:
        return []
    start = os.path.join(folder, "")
    match = _NAME.fullmatch
    found = [(name[-42:-6], start + name) for name in names if match(name)]
    if len(found) < len(names):
        _sweep(start, [name for name in names if is_temporary(name)])
    return found


def temporary_name(path: str) -> str:
    """Where a new rollout at `path` is written before it is linked into place."""
    folder, name = os.path.split(path)
    return os.path.join(folder, f".{name}.{secrets.token_hex(6)}{TEMPORARY_SUFFIX}")


def is_temporary(name: str) -> bool:
    return name.startswith(TEMPORARY_PREFIX) and name.endswith(TEMPORARY_SUFFIX)


def _sweep(start: str, names: list[str]) -> None:
    """Remove what a killed writer left under a temporary name, once it is stale."""
    stale = time.time() - STALE_TEMPORARY_SECONDS
    for name in names:
        with contextlib.suppress(OSError):  # gone already, or not ours to remove
            if os.lstat(start + name).st_mtime < stale:
                os.unlink(start + name)


def rollout_files(home: str | os.PathLike[str]) -> list[Path]:
    """Every rollout file under the home, oldest first (uuid7 ids sort by time)."""
    return [Path(path) for _, path in rollout_entries(home)]


def check_id(value: str, what: str = "session id") -> str:
    """The id in canonical (lower) case, or `UnknownSession` if it could never be one."""
    if not isinstance(value, str) or not value or id_problem(value) is not None:
        shown = echo(value) if isinstance(value, str) else type(value).__name__
        raise UnknownSession(str(value), f"not a {what}: {shown!r}")
    return value.lower()


def find_rollout(home: str | os.PathLike[str], id_or_prefix: str) -> Path:
    """The rollout whose session id is, or uniquely starts with, `id_or_prefix`."""
    prefix = check_id(id_or_prefix)
    matches = [(key, path) for key, path in rollout_entries(home) if key.startswith(prefix)]
    if not matches:
        raise UnknownSession(id_or_prefix)
    if len(matches) == 1 and os.path.islink(matches[0][1]):
        raise RolloutError(matches[0][1], "a symlink, not a rollout file")
    if len(matches) > 1:
        names = ", ".join(key for key, _ in matches[:_MAX_CANDIDATES])
        more = len(matches) - _MAX_CANDIDATES
        if more > 0:
            names += f" and {more} more"
        raise UnknownSession(
            id_or_prefix, f"ambiguous id {echo(id_or_prefix)} matches {len(matches)} sessions: "
            f"{names}"
        )
    return Path(matches[0][1])


def uuid7_millis(key: str) -> int | None:
    """The creation time (Unix ms) a uuid7 id carries, None for other kinds of id."""
    if len(key) != _ID_LENGTH or key[14] != "7":
        return None
    return int(key[:8] + key[9:13], 16)


def unique_prefixes(keys: list[str], every: list[str], minimum: int = 8) -> dict[str, str]:
    """The shortest prefix (at least `minimum` long) telling each key apart from `every` other.

    `every` is sorted; a key's nearest rivals are its neighbours in it. uuid7 ids
    made in the same millisecond share their first 13 characters, so this is
    often longer than the minimum.
    """
    shortest: dict[str, str] = {}
    for key in keys:
        at = bisect.bisect_left(every, key)
        length = minimum
        for index in (at - 1, at + 1 if at < len(every) and every[at] == key else at):
            if 0 <= index < len(every) and every[index] != key:
                length = max(length, _common(key, every[index]) + 1)
        while length < len(key) and key[length - 1] == "-":
            length += 1
        shortest[key] = key[: min(length, len(key))]
    return shortest


def _common(a: str, b: str) -> int:
    length = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        length += 1
    return length
