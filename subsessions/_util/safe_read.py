"""Reading a small file someone else may have planted: a regular file only, never through a
symlink, never blocking (a FIFO), never more than a cap (a link to `/dev/zero`)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


class NotReadable(Exception):
    """Why the file was not read, in words for one error line."""


def read_regular(path: Path, limit: int) -> bytes:
    """The file's bytes; `FileNotFoundError` when it is absent, else `NotReadable`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        problem = "a symbolic link, not a file" if exc.errno == errno.ELOOP else exc.strerror
        raise NotReadable(f"cannot read: {problem or exc}") from None
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotReadable("cannot read: not a regular file")
        try:
            data = f.read(limit + 1)
        except OSError as exc:
            raise NotReadable(f"cannot read: {exc.strerror or exc}") from None
    if len(data) > limit:
        size = f"{limit >> 20} MiB" if limit % (1 << 20) == 0 else f"{limit} bytes"
        raise NotReadable(f"cannot read: larger than {size}")
    return data
