"""The seccomp filter every sandboxed command runs under (bwrap `--seccomp`).

A user namespace with no capabilities still lets a command set the set-user-id bit on a
file it owns, or give it file capabilities; when the engine runs as root that file is
root's, outside the sandbox too, and any local user who runs it is root (Codex's Linux
sandbox filters system calls for the same reason). So: no mode with S_ISUID or S_ISGID
through chmod, open, creat or mknod (the call fails with EPERM), no extended attributes
(`security.capability`: ENOTSUP, which copying tools take as "not supported here"), and
no io_uring or openat2, whose requests the filter could not inspect (ENOSYS: callers fall
back to the plain calls). The program is built once with libseccomp and handed to each
bwrap through a memfd.
"""

from __future__ import annotations

import errno
import functools
import os
import stat
import tempfile
from typing import Any

from subsessions.tools.errors import SandboxUnavailable

_SPECIAL_BITS = (stat.S_ISUID, stat.S_ISGID)
# (system call, index of its mode argument)
_MODE_CALLS = (("chmod", 1), ("fchmod", 1), ("fchmodat", 2), ("fchmodat2", 2),
               ("open", 2), ("openat", 3), ("creat", 1), ("mknod", 1), ("mknodat", 2))
_XATTR_CALLS = ("setxattr", "lsetxattr", "fsetxattr")
_UNINSPECTABLE = ("openat2", "io_uring_setup", "io_uring_enter", "io_uring_register")


@functools.cache
def program() -> bytes | None:
    """The compiled filter, or None where libseccomp is missing (see `filter_fd`)."""
    try:
        import pyseccomp as seccomp  # type: ignore[import-untyped]
    except (ImportError, OSError):  # no package, or no libseccomp.so to load
        return None
    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    for name, index in _MODE_CALLS:
        for bit in _SPECIAL_BITS:
            _add(rules, seccomp.ERRNO(errno.EPERM), name,
                 seccomp.Arg(index, seccomp.MASKED_EQ, bit, bit))
    for name in _XATTR_CALLS:
        _add(rules, seccomp.ERRNO(errno.ENOTSUP), name)
    for name in _UNINSPECTABLE:
        _add(rules, seccomp.ERRNO(errno.ENOSYS), name)
    with tempfile.TemporaryFile() as scratch:  # libseccomp writes to a file descriptor
        rules.export_bpf(scratch)
        scratch.seek(0)
        return scratch.read()


def _add(rules: Any, action: int, name: str, *args: object) -> None:
    try:
        rules.add_rule(action, name, *args)
    except (ValueError, RuntimeError, OSError):  # a call this kernel's libseccomp lacks
        if name not in ("fchmodat2",):
            raise


def filter_fd() -> int | None:
    """A file descriptor holding the filter, for bwrap's `--seccomp` (the caller closes
    it). Without libseccomp a root engine refuses to run commands: its files would be
    root's; any other user's engine runs them unfiltered (its files are its own)."""
    compiled = program()
    if compiled is None:
        if os.geteuid() == 0:
            raise SandboxUnavailable(
                "libseccomp is not installed (apt-get install libseccomp2): as root, "
                "commands need its filter against set-user-id files")
        return None
    fd = os.memfd_create("subsessions-seccomp", os.MFD_CLOEXEC)
    os.write(fd, compiled)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
