"""The real console entry, run as `python -m subsessions` in a subprocess."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from subsessions.rollouts import read_rollout, rollout_files

BUILTINS = ("default", "linter_fixer", "mathematician", "tester")
NESTED = re.compile(r"^(?:│   |    )+[├└]── [0-9a-f-]{36}  ", re.M)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SUBSESSIONS_HOME": str(cwd / "default-home")}
    return subprocess.run(
        [sys.executable, "-m", "subsessions", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    return result.stderr


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A home filled by one `demo --home` run, and its ids oldest first (parent first)."""
    cwd = tmp_path_factory.mktemp("demo")
    result = cli("demo", "--home", str(cwd / "home"), cwd=cwd)
    assert result.returncode == 0, result.stderr
    ids = [read_rollout(p).session_id for p in rollout_files(cwd / "home")]
    return cwd / "home", ids


def test_help(tmp_path: Path) -> None:
    result = cli("--help", cwd=tmp_path)
    assert result.returncode == 0
    for command in ("demo", "profiles", "rollouts"):
        assert command in result.stdout


def test_demo_shows_children_and_a_nested_tree(tmp_path: Path) -> None:
    result = cli("demo", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.search(r"^\s+mathematician\s+done\s+Answer: 24133$", out, re.M), out
    assert re.search(r"^\s+tester\s+done\s+PASS", out, re.M), out
    assert re.search(r"^\s+linter_fixer\s+done\s", out, re.M), out
    assert re.search(r"^\s+default\s+cancelled\s", out, re.M), out
    assert "rollout tree" in out
    assert NESTED.search(out), out
    assert not (tmp_path / "default-home").exists()  # without --home, nothing is left behind


def test_demo_home_leaves_readable_rollouts(demo: tuple[Path, list[str]]) -> None:
    home, _ = demo
    rollouts = [read_rollout(p) for p in rollout_files(home)]
    assert len(rollouts) == 6
    assert all(r.skipped == () for r in rollouts)
    parent = rollouts[0]
    assert parent.parent_id is None and parent.status == "completed"
    children = [r for r in rollouts if r.parent_id == parent.session_id]
    assert sorted(r.meta["session_type"] for r in children) == sorted(BUILTINS)
    (grandchild,) = [r for r in rollouts if r.parent_id not in (None, parent.session_id)]
    assert grandchild.parent_id in {c.session_id for c in children}


def test_profiles_list_shows_builtins_with_their_source(tmp_path: Path) -> None:
    result = cli("profiles", "list", "--home", str(tmp_path / "home"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = [line.split()[:2] for line in result.stdout.splitlines()]
    assert rows == [[name, "builtin"] for name in BUILTINS]


def test_profiles_list_shows_a_user_override_with_its_file(tmp_path: Path) -> None:
    folder = tmp_path / "home" / "profiles"
    folder.mkdir(parents=True)
    (folder / "tester.toml").write_text('name = "tester"\ndescription = "mine"\n')
    result = cli("profiles", "list", "--home", str(tmp_path / "home"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (row,) = [line for line in result.stdout.splitlines() if line.startswith("tester ")]
    assert str(folder / "tester.toml") in row and "mine" in row


def test_profiles_show_prints_instructions(tmp_path: Path) -> None:
    result = cli("profiles", "show", "tester", "--home", str(tmp_path / "home"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "name: tester" in result.stdout
    assert "You are a testing specialist" in result.stdout


def test_profiles_show_unknown_is_one_line_error(tmp_path: Path) -> None:
    result = cli("profiles", "show", "nope", "--home", str(tmp_path / "home"), cwd=tmp_path)
    assert "nope" in assert_one_line_error(result)
    assert result.stdout == ""


def test_malformed_profile_file_is_one_line_naming_it(tmp_path: Path) -> None:
    folder = tmp_path / "home" / "profiles"
    folder.mkdir(parents=True)
    (folder / "broken.toml").write_text('name = "unterminated\n')
    result = cli("profiles", "list", "--home", str(tmp_path / "home"), cwd=tmp_path)
    assert "broken.toml" in assert_one_line_error(result)


def test_rollouts_list_table(demo: tuple[Path, list[str]], tmp_path: Path) -> None:
    home, ids = demo
    result = cli("rollouts", "list", "--home", str(home), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split()[0] == "id" and "status" in header
    assert [row.split()[0] for row in rows] == ids[::-1]  # newest first


def test_rollouts_list_json(demo: tuple[Path, list[str]], tmp_path: Path) -> None:
    home, ids = demo
    result = cli("rollouts", "list", "--json", "--home", str(home), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert [r["id"] for r in rows] == ids[::-1]
    assert sorted(r["source"] for r in rows) == ["exec"] + ["subsession"] * 5
    assert sorted(r["status"] for r in rows) == ["cancelled"] * 2 + ["completed"] * 4
    filtered = cli("rollouts", "list", "--json", "--parent", ids[0], "--home", str(home),
                   cwd=tmp_path)
    assert len(filtered.stdout.splitlines()) == 4


def test_rollouts_show_by_prefix(demo: tuple[Path, list[str]], tmp_path: Path) -> None:
    home, ids = demo
    parent = ids[0]
    prefix = next(parent[:n] for n in range(1, 37)
                  if not any(i.startswith(parent[:n]) for i in ids[1:]))
    result = cli("rollouts", "show", prefix, "--home", str(home), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert parent in out.splitlines()[0]
    assert "[user] Answer four questions about this project." in out
    assert "[assistant] Three sub-sessions finished" in out
    for tool in ("create_session", "wait_session", "cancel_session"):
        assert f"-> {tool}(" in out


def test_rollouts_tree(demo: tuple[Path, list[str]], tmp_path: Path) -> None:
    home, ids = demo
    result = cli("rollouts", "tree", "--home", str(home), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(ids[0])  # the parent is the only root
    assert sorted(re.findall(r"[0-9a-f-]{36}", result.stdout)) == sorted(ids)
    assert len(re.findall(r"^[├└]── ", result.stdout, re.M)) == 4  # the parent's children
    assert len(NESTED.findall(result.stdout)) == 1  # the grandchild, indented under its parent


@pytest.mark.parametrize("bad", ["unknown-id", "../x", "common-prefix"])
def test_rollouts_show_bad_id_is_one_line_error(
    demo: tuple[Path, list[str]], tmp_path: Path, bad: str
) -> None:
    home, ids = demo
    if bad == "common-prefix":
        bad = next(ids[0][:n] for n in range(36, 0, -1)
                   if all(i.startswith(ids[0][:n]) for i in ids))
    result = cli("rollouts", "show", bad, "--home", str(home), cwd=tmp_path)
    assert result.returncode == 1
    assert bad in assert_one_line_error(result)
    assert result.stdout == ""
