"""Worktree isolation: a child in its own `git worktree` of its parent's repository.

Parallel children that edit one checkout trample each other (Claude Code's Agent tool has
`isolation: "worktree"` for this). A worktree child works in `home/worktrees/{id}` on branch
`subsessions/{id}`, made from the parent's `HEAD` with the real `git`.

Its sandbox writes the worktree, not the parent's checkout. `git commit` in a worktree also
writes into the repository's own git directory, so these are writable too: the worktree's
admin folder (`worktrees/{name}`: its HEAD, index, logs), the object store, and the folders
of its own branch's ref and reflog. Nothing else of the repository or of the parent's
checkout is, even inside a writable temporary folder: the config and hooks stay read-only,
so a sandboxed child cannot plant a hook that runs unsandboxed.

When the child ends: a worktree with no change (an untracked file is one) and no commit is
removed with its branch; otherwise it stays, and so does the worktree of a cancelled child,
for inspection (`subsessions worktrees list|clean`).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from attrs import frozen

from subsessions.errors import WorktreeUnavailable

BRANCH_PREFIX = "subsessions/"
GIT_TIMEOUT = 60.0  # seconds for one git command; a hung one fails the spawn or the cleanup


@frozen
class Worktree:
    """A worktree child's checkout: where it is, its branch, and what git writes for it."""

    path: str
    branch: str
    base: str  # the commit it was made from
    admin: str  # its folder in the repository's git directory (`worktrees/{name}`)
    common: str  # the repository's git directory
    checkout: str = ""  # the parent's checkout it was made from

    def read_only(self) -> tuple[str, ...]:
        """What stays read-only to it even inside a writable temporary folder (a repository
        under /tmp): the parent's checkout and the repository's git directory."""
        return tuple(path for path in (self.checkout, self.common) if path)

    def writable(self) -> tuple[str, ...]:
        """What its sandbox may write besides the temporary folders: see the module doc."""
        ref = self.branch.rsplit("/", 1)[0]
        return (self.path, self.admin, os.path.join(self.common, "objects"),
                os.path.join(self.common, "refs", "heads", ref),
                os.path.join(self.common, "logs", "refs", "heads", ref))

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "branch": self.branch}


async def git(cwd: str, *args: str) -> tuple[int, str]:
    """`git -C cwd args`: its exit status and its output (stdout, else stderr), stripped.
    The repository's hooks never run for these: what we do with git is mechanical."""
    proc = await asyncio.create_subprocess_exec(
        "git", "-C", cwd, "-c", "core.hooksPath=/dev/null", *args, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"})
    try:
        async with asyncio.timeout(GIT_TIMEOUT):
            out, err = await proc.communicate()
    except BaseException:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    text = (out if proc.returncode == 0 else err or out).decode("utf-8", "replace")
    return proc.returncode or 0, text.strip()


async def add(cwd: str, home: Path, child_id: str) -> Worktree:
    """A worktree of `HEAD` of the repository at `cwd` for child `child_id`."""
    try:
        status, top = await git(cwd, "rev-parse", "--show-toplevel")
    except FileNotFoundError:
        raise WorktreeUnavailable("isolation \"worktree\" needs git, which was not found"
                                  ) from None
    if status != 0 or not top:
        raise WorktreeUnavailable(f'isolation "worktree" needs a git repository at {cwd}')
    status, base = await git(top, "rev-parse", "--verify", "HEAD^{commit}")
    if status != 0:
        raise WorktreeUnavailable(
            f'isolation "worktree" needs a commit to start from in {top} (git: {base})')
    folder = home / "worktrees"
    folder.mkdir(mode=0o700, exist_ok=True)
    path, branch = str(folder / child_id), BRANCH_PREFIX + child_id
    status, said = await git(top, "worktree", "add", "--quiet", "-b", branch, path, base)
    if status != 0:
        raise WorktreeUnavailable(f"git worktree add failed in {top}: {said}")
    _, admin = await git(path, "rev-parse", "--absolute-git-dir")
    _, common = await git(path, "rev-parse", "--path-format=absolute", "--git-common-dir")
    made = Worktree(path, branch, base, admin, common, top)
    for folder_ in made.writable()[2:]:  # a bind needs them to exist
        os.makedirs(folder_, exist_ok=True)
    return made


async def again(worktree: Worktree) -> None:
    """A removed worktree made anew where it was, from where it started (an ended child's
    follow-up works where its history says it does)."""
    status, said = await git(worktree.common, "worktree", "add", "--quiet", "-B",
                             worktree.branch, worktree.path, worktree.base)
    if status != 0:
        raise WorktreeUnavailable(f"git worktree add failed in {worktree.common}: {said}")


async def changed(worktree: Worktree) -> bool:
    """Whether it holds a change (an untracked file is one) or a commit; a worktree git
    cannot read counts as changed (kept for inspection)."""
    status, out = await git(worktree.path, "status", "--porcelain", "--untracked-files=all")
    if status != 0 or out:
        return True
    status, head = await git(worktree.path, "rev-parse", "HEAD")
    return status != 0 or head != worktree.base


async def remove(worktree: Worktree) -> None:
    """The worktree and its branch, gone (the branch only if no other branch holds its
    commits: `worktrees clean` keeps branches that hold commits)."""
    await git(worktree.common, "worktree", "remove", "--force", worktree.path)
    if not await _holds_commits(worktree.common, worktree.branch):
        await git(worktree.common, "branch", "-D", worktree.branch)


async def settle(worktree: Worktree) -> bool:
    """An ended child's worktree: removed when it holds nothing; whether it was kept."""
    if await changed(worktree):
        return True
    await remove(worktree)
    return False


async def _holds_commits(common: str, branch: str) -> bool:
    """Whether `branch` has a commit that no other branch or tag has."""
    status, out = await git(common, "rev-list", "-1", f"refs/heads/{branch}", "--not",
                            f"--exclude={branch}", "--branches", "--tags")
    return status != 0 or bool(out)


async def found(home: Path) -> list[Worktree]:
    """The worktrees under `home/worktrees` that git still knows, oldest name first."""
    folder = home / "worktrees"
    made: list[Worktree] = []
    if not folder.is_dir():
        return made
    for entry in sorted(folder.iterdir()):
        if entry.is_symlink() or not entry.is_dir():
            continue
        status, branch = await git(str(entry), "symbolic-ref", "--short", "HEAD")
        _, admin = await git(str(entry), "rev-parse", "--absolute-git-dir")
        _, common = await git(str(entry), "rev-parse", "--path-format=absolute",
                              "--git-common-dir")
        if status != 0 or not admin.startswith("/") or not common.startswith("/"):
            continue
        made.append(Worktree(str(entry), branch, "", admin, common))
    return made


def describe(worktree: Worktree, status: str) -> dict[str, Any]:
    """One row of `subsessions worktrees list`."""
    return {"session_id": Path(worktree.path).name, "status": status, **worktree.as_dict()}
