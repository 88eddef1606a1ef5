"""The sandbox: which paths a session may write, and the bubblewrap command line for `shell`.

`read-only`: the whole file system is mounted read-only. `workspace-write`: the same, with
the workspace (`cwd`), `writable_roots` and the temp dirs (`$TMPDIR`, `/tmp`) bound
writable, except a `.git` directly inside one of them, which stays read-only (as in Codex:
a sandboxed command must not plant git hooks that later run unsandboxed). The network is
unshared unless `network_access` is set (workspace-write only). `danger-full-access`: no
sandbox.

For `shell` the policy is enforced by bubblewrap (`bwrap`, found as `BWRAP_PATH`), in new
mount, pid and (usually) network namespaces, `--die-with-parent`. Because the command runs
as pid 1's child in its own pid namespace, killing bwrap kills every process the command
started, daemonised ones included. If bwrap is missing or cannot set up the sandbox the
command is refused (`SandboxUnavailable`), never run unsandboxed.

For the file tools every path is resolved (symlinks and `..`) before `check_write`.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

from subsessions.tools import limits
from subsessions.tools.context import ToolContext
from subsessions.tools.errors import SandboxUnavailable, WriteNotAllowed

BWRAP_PATH = "bwrap"  # a name looked up on PATH, or a path; tests point it elsewhere


def resolve(cwd: str, path: str) -> str:
    """`path` (relative to `cwd`) with every symlink and `..` resolved, as the kernel would."""
    return os.path.realpath(os.path.join(cwd, os.path.expanduser(path)))


def temp_dirs(context: ToolContext) -> list[str]:
    found: list[str] = []
    tmpdir = os.environ.get("TMPDIR")
    if tmpdir and not context.exclude_tmpdir_env_var:
        found.append(tmpdir)
    if not context.exclude_slash_tmp:
        found.append("/tmp")
    return found


def writable_roots(context: ToolContext) -> list[str]:
    """The resolved, existing directories a `workspace-write` session may write in."""
    if context.sandbox != "workspace-write":
        return []
    roots: list[str] = []
    for candidate in (context.cwd, *context.writable_roots, *temp_dirs(context)):
        root = os.path.realpath(os.path.join(context.cwd, candidate))
        if os.path.isdir(root) and root not in roots:
            roots.append(root)
    return roots


def read_only_subpaths(roots: list[str], context: ToolContext) -> list[str]:
    """`.git` (a directory or a worktree's file) directly inside a writable root, and the
    context's read-only paths (the engine's home) that lie inside one."""
    found = []
    for root in roots:
        git = os.path.join(root, ".git")
        if os.path.lexists(git) and not os.path.islink(git):
            found.append(git)
    for path in context.read_only_paths:
        real = os.path.realpath(path)
        if os.path.isdir(real) and any(_inside(real, root) for root in roots):
            found.append(real)
    return found


def mounts(context: ToolContext) -> list[tuple[str, bool]]:
    """The writable roots and the read-only paths inside them, each with whether it is
    writable, parents first: the deepest one holding a path decides, as the later, nested
    mount does in bwrap (a worktree child's git object store is writable inside the
    repository's read-only git directory)."""
    roots = writable_roots(context)
    found = [(root, True) for root in roots]
    found += [(path, False) for path in read_only_subpaths(roots, context)]
    return sorted(found, key=lambda mount: len(mount[0]))


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def write_problem(context: ToolContext, resolved: str) -> str | None:
    """Why the sandbox forbids writing `resolved` (an already resolved path), or None."""
    if context.sandbox == "danger-full-access":
        return None
    if context.sandbox == "read-only":
        return "the sandbox is read-only"
    found = mounts(context)
    holding = [mount for mount in found if _inside(resolved, mount[0])]
    if not holding:
        roots = [path for path, writable in found if writable]
        return (
            "it is outside the writable roots of the workspace-write sandbox "
            f"({', '.join(roots)})"
        )
    path, writable = holding[-1]
    return None if writable else f"{path} stays read-only in the sandbox"


def resolve_for_write(context: ToolContext, path: str, *, removing: bool = False) -> str:
    """The path a write (or, with `removing`, an unlink) of `path` would really touch.

    Removing a symlink removes the link itself, so only its directory is resolved then.
    """
    if not removing:
        return resolve(context.cwd, path)
    joined = os.path.normpath(os.path.join(context.cwd, os.path.expanduser(path)))
    parent, name = os.path.split(joined)
    return os.path.join(os.path.realpath(parent), name)


def check_write(context: ToolContext, path: str, *, removing: bool = False) -> str:
    """The resolved path to write (or remove), or `WriteNotAllowed`."""
    resolved = resolve_for_write(context, path, removing=removing)
    problem = write_problem(context, resolved)
    if problem is not None:
        raise WriteNotAllowed(_shown(path, resolved), problem)
    return resolved


def _shown(path: str, resolved: str) -> str:
    return path if resolved == path else f"{path} ({resolved})"


def find_bwrap() -> str:
    found = shutil.which(BWRAP_PATH)
    if found is None:
        raise SandboxUnavailable(f"bubblewrap ({BWRAP_PATH}) was not found")
    return found


def bwrap_argv(
    context: ToolContext, argv: list[str], workdir: str, status_fd: int,
    seccomp_fd: int | None = None,
) -> list[str]:
    """The bubblewrap command running `argv` in `workdir` under the context's sandbox.

    bwrap writes JSON lines to `status_fd`; an `exit-code` line means the command ran.
    `seccomp_fd` holds the system-call filter (`seccomp.py`).
    """
    if context.sandbox == "danger-full-access":
        raise ValueError("danger-full-access runs commands without bubblewrap")
    args = [
        find_bwrap(),
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--unshare-pid",
        "--die-with-parent",
        # No capabilities inside, for root too: a user namespace and every capability
        # dropped, so nothing can remount, and a new session so nothing can push input
        # into the engine's terminal (TIOCSTI), as Codex runs it.
        "--unshare-user",
        "--cap-drop", "ALL",
        "--new-session",
    ]
    if _knows_disable_userns(args[0]):  # no nested user namespace to regain capabilities in
        args.append("--disable-userns")
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    if context.sandbox == "read-only" or not context.network_access:
        args.append("--unshare-net")
    for path, writable in mounts(context):  # parents first: a nested bind stays on top
        args += ["--bind" if writable else "--ro-bind", path, path]
    args += ["--chdir", workdir, "--json-status-fd", str(status_fd), "--"]
    return [*args, *limits.inside(context.max_processes), *argv]


@functools.cache
def _knows_disable_userns(bwrap: str) -> bool:
    """bwrap 0.8 and later have `--disable-userns`; asked once per bwrap."""
    try:
        done = subprocess.run([bwrap, "--help"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return b"--disable-userns" in done.stdout + done.stderr
