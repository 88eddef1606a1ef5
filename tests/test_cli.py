"""The real console entry, run as `python -m subsessions` in a subprocess."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import orjson
import pytest

from subsessions._version import __version__
from subsessions.rollouts import read_rollout, rollout_files
from subsessions.rollouts.recorder import rollout_path

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
    assert re.search(r"^\s+mathematician\s+completed\s+Answer: 24133$", out, re.M), out
    assert re.search(r"^\s+tester\s+completed\s+PASS", out, re.M), out
    assert re.search(r"^\s+linter_fixer\s+completed\s", out, re.M), out
    assert re.search(r"^\s+default\s+cancelled\s", out, re.M), out
    assert "rollout tree" in out
    assert NESTED.search(out), out
    assert not (tmp_path / "default-home").exists()  # without --home, nothing is left behind


def test_demo_home_leaves_readable_rollouts(demo: tuple[Path, list[str]]) -> None:
    home, _ = demo
    rollouts = [read_rollout(p) for p in rollout_files(home)]
    # scene 1: a parent, four children, one grandchild; scene 2: a parent and two workers
    assert len(rollouts) == 9
    assert all(r.skipped == () for r in rollouts)
    parent, worker_parent = [r for r in rollouts if r.parent_id is None]
    assert parent.status == worker_parent.status == "completed"
    children = [r for r in rollouts if r.parent_id == parent.session_id]
    assert sorted(r.meta["session_type"] for r in children) == sorted(BUILTINS)
    grandchildren = [r for r in rollouts
                     if r.parent_id not in (None, parent.session_id, worker_parent.session_id)]
    (grandchild,) = grandchildren
    assert grandchild.parent_id in {c.session_id for c in children}
    workers = [r for r in rollouts if r.parent_id == worker_parent.session_id]
    assert sorted(r.meta["session_type"] for r in workers) == ["linter_fixer", "tester"]
    assert all(r.status == "completed" for r in workers)


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
    assert header.split() == [
        "id", "started", "source", "profile", "model", "status", "duration", "tokens"
    ]
    prefixes = [row.split()[0] for row in rows]
    assert len(prefixes) == len(ids)
    for prefix, full in zip(prefixes, ids[::-1], strict=True):  # newest first
        assert full.startswith(prefix) and len(prefix) >= 8
        assert [i for i in ids if i.startswith(prefix)] == [full]  # enough to name it alone
    assert "\x1b[" not in result.stdout  # piped: no colour


def test_rollouts_list_json(demo: tuple[Path, list[str]], tmp_path: Path) -> None:
    home, ids = demo
    result = cli("rollouts", "list", "--json", "--home", str(home), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert [r["id"] for r in rows] == ids[::-1]
    whole = {r.session_id: r for r in map(read_rollout, rollout_files(home))}
    for row in rows:  # each row says what the whole transcript says
        rollout = whole[row["id"]]
        assert (row["source"], row["status"], row["parent"], row["profile"]) == (
            rollout.source_kind, rollout.status, rollout.parent_id, rollout.profile
        )
        assert row["tokens"] == (rollout.total_tokens or None)
    assert {r["status"] for r in rows} == {"completed", "cancelled"}  # the demo cancels one
    children = [i for i in ids[::-1] if whole[i].parent_id == ids[0]]
    assert len(children) == 4
    filtered = cli("rollouts", "list", "--json", "--parent", ids[0][:18], "--home", str(home),
                   cwd=tmp_path)
    assert [orjson.loads(line)["id"] for line in filtered.stdout.splitlines()] == children


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
    whole = {r.session_id: r for r in map(read_rollout, rollout_files(home))}
    roots = [i for i in ids if whole[i].parent_id is None]
    depth = {i: 0 if i in roots else 1 if whole[i].parent_id in roots else 2 for i in ids}
    lines = result.stdout.splitlines()
    assert lines[0].startswith(ids[0])  # the demo's first parent is the first root
    assert [line[:36] for line in lines if line[:1] in "0123456789abcdef"] == roots
    assert sorted(re.findall(r"[0-9a-f-]{36}", result.stdout)) == sorted(ids)
    children = len(re.findall(r"^[├└]── ", result.stdout, re.M))
    assert children == sum(d == 1 for d in depth.values())
    assert len(NESTED.findall(result.stdout)) == sum(d == 2 for d in depth.values()) >= 1


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


# -- a closed pipe ----------------------------------------------------------------------------


def big_rollouts(home: Path, count: int) -> list[str]:
    """`count` finished sessions with long model names, the first with a 2 MB message: more
    than a pipe holds, so a reader that stops early closes it under the writer."""
    ids = []
    for n in range(count):
        started = 1_790_000_000 + n
        session_id = str(uuid.UUID(int=(started * 1000 << 80) | (0x7 << 76) | (0b10 << 62)))
        meta = {"id": session_id, "timestamp": "2026-09-21T12:00:00Z", "source": "exec",
                "model": "m" * 30_000}
        said = {"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "line\n" * (400_000 if n == 0 else 1)}]}
        lines = [("session_meta", meta), ("event_msg", {"type": "task_started"}),
                 ("response_item", said), ("event_msg", {"type": "task_complete"})]
        path = Path(rollout_path(home, session_id, started))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(
            orjson.dumps({"timestamp": "2026-09-21T12:00:01Z", "type": kind, "payload": payload})
            + b"\n" for kind, payload in lines))
        ids.append(session_id)
    return ids


@pytest.mark.parametrize("action", ["list", "show"])
def test_output_into_a_pipe_closed_early_ends_quietly(tmp_path: Path, action: str) -> None:
    home = tmp_path / "home"
    ids = big_rollouts(home, 40)
    args = ["list", "--json"] if action == "list" else ["show", ids[0]]
    expected = f'{{"id":"{ids[-1]}"' if action == "list" else f"session {ids[0]}"
    writer = subprocess.Popen(
        [sys.executable, "-m", "subsessions", "rollouts", *args, "--home", str(home)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert writer.stdout is not None and writer.stderr is not None
    head = subprocess.Popen(["head", "-1"], stdin=writer.stdout, stdout=subprocess.PIPE)
    writer.stdout.close()  # only `head` reads it now
    shown, _ = head.communicate(timeout=60)
    err = writer.stderr.read()
    writer.stderr.close()
    assert err == b""
    assert writer.wait(timeout=60) == 128 + signal.SIGPIPE  # as if SIGPIPE had ended it
    (line,) = shown.decode().splitlines()
    assert line.startswith(expected)


# -- the command line's own mistakes --------------------------------------------------------


def test_home_before_the_command(demo: tuple[Path, list[str]], tmp_path: Path) -> None:
    home, ids = demo
    for args in (("--home", str(home), "rollouts", "list", "--json"),
                 ("--home", str(tmp_path / "elsewhere"), "rollouts", "list", "--json",
                  "--home", str(home))):  # the one nearer the command wins
        result = cli(*args, cwd=tmp_path)
        assert (result.returncode, result.stderr) == (0, "")
        assert [orjson.loads(line)["id"] for line in result.stdout.splitlines()] == ids[::-1]
    shown = cli("--home", str(home), "rollouts", "show", ids[0], cwd=tmp_path)
    assert shown.returncode == 0 and shown.stdout.startswith(f"session {ids[0]}")


def test_version(tmp_path: Path) -> None:
    result = cli("--version", cwd=tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (
        0, f"subsessions {__version__}\n", "")


def test_nothing_to_show_says_so_and_exits_1(demo: tuple[Path, list[str]], tmp_path: Path) -> None:
    home, _ = demo
    missing, empty = tmp_path / "nonexistent", tmp_path / "empty"
    empty.mkdir()
    cases = [
        (("rollouts", "list", "--home", str(missing)), f"{missing}: no such directory"),
        (("rollouts", "tree"), f"{tmp_path / 'default-home'}: no such directory"),
        (("rollouts", "list", "--home", str(empty)), f"no sessions in {empty}"),
        (("rollouts", "tree", "--home", str(empty)), f"no sessions in {empty}"),
        (("rollouts", "list", "--source", "nope", "--home", str(home)),
         "no sessions match --source nope (sources are cli, exec, mcp, subsession)"),
        (("rollouts", "list", "--json", "--status", "failed", "--home", str(home)),
         "no sessions match --status failed"),
    ]
    for args, message in cases:
        result = cli(*args, cwd=tmp_path)
        assert result.returncode == 1 and result.stdout == "", args  # no empty table
        assert assert_one_line_error(result).startswith(f"subsessions: {message}"), args


def test_run_mistakes_are_told_in_the_users_words(tmp_path: Path) -> None:
    offline = ("--home", str(tmp_path / "home"), "--base-url", "http://127.0.0.1:9/v1")
    err = assert_one_line_error(cli("run", "hello", "--profile", "nope", *offline, cwd=tmp_path))
    assert err == ("subsessions: no profile named 'nope'; have: default, linter_fixer, "
                   "mathematician, tester (see subsessions profiles list)\n")
    for empty in ("", "  \n"):
        err = assert_one_line_error(cli("run", empty, *offline, cwd=tmp_path))
        assert err == "subsessions: PROMPT is empty: say what the session should do\n"
