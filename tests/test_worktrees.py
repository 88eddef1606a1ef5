"""Worktree isolation (DESIGN 3.13): children in git worktrees of their own, with the real
`git` and the real bubblewrap sandbox.

Two worktree children of one parent each commit a different file, and the parent's checkout
is unchanged; a child that changes nothing leaves nothing behind; a cancelled one leaves its
worktree for inspection; a sandboxed child can write its worktree and commit, but neither
the parent's checkout nor the repository's hooks or config; a request outside a repository
is one line; `subsessions worktrees list|clean` show and remove what ended children left.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from openai_support import cli_env
from scripting import WORKER, Script, call, first_prompt, outputs

from subsessions import Engine, InvalidArguments, Profile, SessionConfig, WorktreeUnavailable

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

GIT_ID = ["-c", "user.name=child", "-c", "user.email=child@example.invalid"]


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True,
                          check=True, timeout=60).stdout.strip()


def _is_dir(path: str) -> bool:
    return Path(path).is_dir()


def _lines(path: str) -> list[str]:
    return Path(path).read_text().splitlines()


def _branches(repo: Path) -> list[str]:
    return _git(repo, "for-each-ref", "--format=%(refname:short)",
                "refs/heads/subsessions/").split()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with one commit: README."""
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    (root / "README").write_text("hello\n")
    _git(root, "add", "README")
    _git(root, *GIT_ID, "commit", "-qm", "first")
    return root


def _shell(script: str) -> dict[str, Any]:
    return call("shell", command=["bash", "-c", script])


def _said(output: dict[str, Any]) -> str:
    """What a shell call printed."""
    return str(json.loads(output["output"])["output"]).strip()


def _committer(name: str) -> list[Any]:
    """A child's steps: write `{name}.txt` and commit it, then answer."""
    git = "git " + " ".join(GIT_ID)
    return [lambda outs: [_shell(f"echo {name} > {name}.txt && git add {name}.txt && "
                                 f"{git} commit -qm 'add {name}' && echo committed")],
            lambda outs: [f"{name}: " + _said(outs[-1])]]


def _config(cwd: Path, **kw: Any) -> SessionConfig:
    return SessionConfig(cwd=str(cwd), builtin_tools=("shell",), approval="never",
                         custom_agents=(WORKER,), **kw)


async def test_two_worktree_children_commit_apart_and_the_checkout_is_unchanged(
    repo: Path, tmp_path: Path
) -> None:
    script = Script(route=first_prompt)
    script.play("commit a", _committer("a"))
    script.play("commit b", _committer("b"))
    head = _git(repo, "rev-parse", "HEAD")
    async with asyncio.timeout(120):
        async with Engine(tmp_path / "home", model_client=script.model) as engine:
            parent = await engine.create_session(_config(repo))
            ids = [await parent.subsessions.spawn_child("worker", f"commit {n}",
                                                        isolation="worktree") for n in "ab"]
            await parent.subsessions.wait_all(ids)
            infos = [parent.subsessions.info(i) for i in ids]
    for name, info in zip("ab", infos, strict=True):
        assert info.result is not None and info.result.endswith("committed"), info
        assert info.worktree is not None
        path, branch = Path(info.worktree["path"]), info.worktree["branch"]
        assert branch == f"subsessions/{info.session_id}"
        assert path == tmp_path / "home" / "worktrees" / info.session_id
        assert (path / f"{name}.txt").read_text() == f"{name}\n"
        assert _git(repo, "log", "-1", "--format=%s", branch) == f"add {name}"
        assert _git(repo, "show", f"{branch}:{name}.txt") == name
    # the parent's checkout: the same commit, nothing changed, neither file there
    assert _git(repo, "rev-parse", "HEAD") == head
    assert _git(repo, "status", "--porcelain") == ""
    assert sorted(os.listdir(repo)) == [".git", "README"]


async def test_a_child_that_changes_nothing_leaves_no_worktree_and_no_branch(
    repo: Path, tmp_path: Path
) -> None:
    script = Script(route=first_prompt)
    script.play("look", [lambda outs: [_shell("cat README")], lambda outs: ["seen"],
                         lambda outs: [_shell("echo more > more.txt")], lambda outs: ["more"]])
    where = tmp_path / "home" / "worktrees"
    async with asyncio.timeout(60):
        async with Engine(tmp_path / "home", model_client=script.model) as engine:
            parent = await engine.create_session(_config(repo))
            child = await parent.subsessions.spawn_child("worker", "look",
                                                         isolation="worktree")
            assert await parent.subsessions.wait_child(child) == "seen"
            assert parent.subsessions.info(child).worktree is None
            assert "worktree" not in parent.subsessions.info(child).listing()
            assert not (where / child).exists()
            assert _branches(repo) == []
            assert "worktrees" not in _git(repo, "worktree", "list")
            # a follow-up works where its history says: the worktree is made again
            assert await parent.subsessions.send_message(child, "once more") == "started"
            assert await parent.subsessions.wait_child(child) == "more"
            assert parent.subsessions.info(child).worktree == {
                "path": str(where / child), "branch": f"subsessions/{child}"}
    assert (where / child / "more.txt").read_text() == "more\n"


async def test_a_profile_asks_for_a_worktree_and_a_cancelled_child_keeps_it(
    repo: Path, tmp_path: Path
) -> None:
    isolated = Profile(name="isolated", description="works apart", isolation="worktree")
    script = Script(route=first_prompt)
    script.hold("stuck")
    async with asyncio.timeout(60):
        async with Engine(tmp_path / "home", model_client=script.model) as engine:
            parent = await engine.create_session(SessionConfig(
                cwd=str(repo), custom_agents=(isolated,)))
            child = await parent.subsessions.spawn_child("isolated", "stuck")
            await script.started("stuck")
            await parent.subsessions.cancel_child(child)
            info = parent.subsessions.info(child)
    assert info.worktree is not None and _is_dir(info.worktree["path"])
    assert _branches(repo) == [f"subsessions/{child}"]


async def test_outside_a_repository_a_worktree_child_is_refused_in_one_line(
    tmp_path: Path
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    script = Script(route=first_prompt)
    script.play("parent task", [
        lambda outs: [call("create_session", session_type="worker", prompt="x", budget=None,
                           fork_turns=None, output_schema=None, isolation="worktree")],
        lambda outs: [call("create_session", session_type="worker", prompt="x", budget=None,
                           fork_turns=None, output_schema=None, isolation="sideways")],
        lambda outs: ["done"]])
    async with asyncio.timeout(60):
        async with Engine(tmp_path / "home", model_client=script.model) as engine:
            parent = await engine.create_session(_config(plain))
            with pytest.raises(WorktreeUnavailable) as refused:
                await parent.subsessions.spawn_child("worker", "x", isolation="worktree")
            assert str(refused.value) == (
                f'isolation "worktree" needs a git repository at {plain}')
            with pytest.raises(InvalidArguments, match='isolation: must be null, "none" or'):
                await parent.subsessions.spawn_child("worker", "x", isolation="yes")
            with pytest.raises(InvalidArguments, match="needs a profile"):
                await parent.subsessions.spawn_child(SessionConfig(), "x",
                                                     isolation="worktree")
            assert await parent.send_and_wait("parent task") == "done"
            assert parent.subsessions.children() == []
    told = [o["output"] for o in outputs(script.seen["parent task"][-1])]
    assert told == [f'isolation "worktree" needs a git repository at {plain}',
                    'invalid arguments for create_session: isolation: must be null, "none" '
                    "or \"worktree\", not 'sideways'"]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
async def test_a_worktree_child_cannot_write_the_checkout_or_plant_a_hook(
    repo: Path, tmp_path: Path
) -> None:
    """Its sandbox writes its worktree and what `git commit` needs; the parent's checkout,
    the repository's hooks and config stay read-only (a planted hook would run unsandboxed
    at the user's next commit)."""
    attacks = {
        "checkout": f"echo x > {repo}/planted",
        "hook": f"printf '#!/bin/sh\\necho owned' > {repo}/.git/hooks/pre-commit",
        "config": f"git config --file {repo}/.git/config core.hooksPath /tmp",
        "home": f"echo x > {tmp_path}/home/planted",
    }
    probes = " ; ".join(f"({cmd}) 2>/dev/null && echo {name}:written || echo {name}:refused"
                        for name, cmd in attacks.items())
    script = Script(route=first_prompt)
    script.play("attack", [lambda outs: [_shell(probes)],
                           lambda outs: [_said(outs[-1])]])
    async with asyncio.timeout(60):
        async with Engine(tmp_path / "home", model_client=script.model) as engine:
            parent = await engine.create_session(_config(repo))
            child = await parent.subsessions.spawn_child("worker", "attack",
                                                         isolation="worktree")
            said = await parent.subsessions.wait_child(child)
    assert said is not None
    for name in attacks:
        assert f"{name}:refused" in said, said
    assert not (repo / "planted").exists() and not (repo / ".git/hooks/pre-commit").exists()
    assert "hooksPath" not in (repo / ".git" / "config").read_text()


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "subsessions", "worktrees", *args,
                           "--home", str(home)], capture_output=True, text=True,
                          env=cli_env(), timeout=120)


async def test_worktrees_list_and_clean_remove_only_what_ended_children_left(
    repo: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    script = Script(route=first_prompt)
    script.play("commit a", _committer("a"))
    script.play("dirty", [lambda outs: [_shell("echo scratch > notes.txt")],
                          lambda outs: ["left a note"]])
    script.hold("stuck")
    async with asyncio.timeout(90):
        async with Engine(home, model_client=script.model) as engine:
            parent = await engine.create_session(_config(repo))
            committed, dirty, running = [
                await parent.subsessions.spawn_child("worker", p, isolation="worktree")
                for p in ("commit a", "dirty", "stuck")]
            await parent.subsessions.wait_all([committed, dirty])
            await script.started("stuck")
            listed = await asyncio.to_thread(_cli, home, "list", "--json")
            assert listed.returncode == 0, listed.stderr
            rows = {row["session_id"]: row for row in json.loads(listed.stdout)}
            assert {rows[committed]["status"], rows[dirty]["status"]} == {"completed"}
            assert rows[running]["status"] == "running"
            assert rows[dirty]["branch"] == f"subsessions/{dirty}"
            cleaned = await asyncio.to_thread(_cli, home, "clean")
            assert cleaned.returncode == 0, cleaned.stderr
            assert (home / "worktrees" / running).is_dir()  # its child still runs
            for gone in (committed, dirty):
                assert not (home / "worktrees" / gone).exists()
            branches = _branches(repo)
            # the committed child's branch holds a commit: kept; the dirty one's had none
            # (and the running child's worktree, with its branch, is left alone)
            assert branches == sorted(f"subsessions/{c}" for c in (committed, running))
            assert _git(repo, "show", f"subsessions/{committed}:a.txt") == "a"
    bad = await asyncio.to_thread(_cli, tmp_path / "nowhere", "list")
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1, bad.stderr
    assert "no such directory" in bad.stderr


async def test_the_model_asks_for_a_worktree_and_its_wait_names_it(
    repo: Path, tmp_path: Path
) -> None:
    script = Script(route=first_prompt)
    script.play("commit a", _committer("a"))
    script.play("parent task", [
        lambda outs: [call("create_session", session_type="worker", prompt="commit a",
                           budget=None, fork_turns=None, output_schema=None,
                           isolation="worktree")],
        lambda outs: [call("wait_session", session_id=json.loads(outs[0]["output"])[
            "session_id"], timeout_ms=60_000)],
        lambda outs: ["done"]])
    async with asyncio.timeout(60):
        async with Engine(tmp_path / "home", model_client=script.model) as engine:
            parent = await engine.create_session(_config(repo))
            assert await parent.send_and_wait("parent task") == "done"
            [child] = parent.subsessions.children()
    waited = json.loads(outputs(script.seen["parent task"][-1])[1]["output"])
    where = str(tmp_path / "home" / "worktrees" / child.session_id)
    assert waited == {"result": "a: committed", "worktree": {
        "path": where, "branch": f"subsessions/{child.session_id}"}}
    lines = _lines(parent.rollout_path)
    assert any(f"its worktree {where} on branch subsessions/{child.session_id} is kept" in line
               for line in lines)
