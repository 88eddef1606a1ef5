"""`subsessions watch`'s model and `--once`: what each row says, following appends and new files,
damaged files, Codex's own rollouts, and the window over a big home. The live view's keys are in
tests/test_watch_app.py; a real terminal beside a live run in tests/e2e/test_watch_tmux.py."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from watch_support import (
    Rollout,
    codex_home,
    day_folder,
    dead_pid,
    long_rollout,
    once_process,
)

from subsessions.cli import main
from subsessions.cli.demo import run_demo
from subsessions.rollouts import read_rollout, rollout_files
from subsessions.watch.cells import amount
from subsessions.watch.follower import Follower
from subsessions.watch.forest import Row, build_rows
from subsessions.watch.stats import DAMAGED

REPO = str(Path(__file__).resolve().parents[1])
ODD = "01a20000-0000-7000-8000-0000000000"  # hand-made files: ids of this prefix


def rows_of(follower: Follower) -> list[Row]:
    return build_rows(follower.sessions, follower.alive)


def row(rows: list[Row], session_id: str) -> Row:
    [found] = [r for r in rows if r.stats.session_id == session_id]
    return found


def once(home: Path, *extra: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["watch", "--once", "--home", str(home), *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- a real run ------------------------------------------------------------------------------
async def test_once_shows_the_tree_of_a_real_run_with_its_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    assert await run_demo(home, io.StringIO()) == 0
    follower = Follower(str(home))
    follower.open()
    rows = rows_of(follower)
    assert len(rows) == len(rollout_files(home))
    for r in rows:  # every count as the whole-file reader reads it
        rollout = read_rollout(r.stats.path)
        counts = rollout.events("token_count")
        total = counts[-1]["info"]["total_token_usage"] if counts else {}
        assert r.status == rollout.status
        assert r.stats.turns == len(counts)
        assert r.stats.input_tokens == total.get("input_tokens", 0)
        assert r.stats.output_tokens == total.get("output_tokens", 0)
        calls = [i for i in rollout.response_items() if i["type"] == "function_call"]
        assert r.stats.tool_calls == len(calls)
        assert r.depth == (0 if rollout.parent_id is None else 1 + row(
            rows, rollout.parent_id).depth)
    parents = [r for r in rows if r.totals is not None]
    assert parents
    for parent in parents:
        below = [r for r in rows if r.stats.parent_id == parent.stats.session_id]
        assert below and rows.index(below[0]) == rows.index(parent) + 1
        assert parent.totals is not None
        assert parent.totals.input_tokens == parent.stats.input_tokens + sum(
            (r.totals.input_tokens if r.totals else r.stats.input_tokens) for r in below)
    code, out, err = once(home, capsys=capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["SESSION", "PROFILE", "MODEL", "STATUS"]
    assert len(lines) == 1 + len(rows)
    children = [line for line in lines[1:] if line.startswith("  ")]
    assert len(children) == sum(1 for r in rows if r.depth > 0)
    assert any("mathematician" in line and "cancelled" in line for line in children)


# -- following -------------------------------------------------------------------------------
def test_appends_are_read_once_and_a_torn_line_waits_for_its_end(tmp_path: Path) -> None:
    session = Rollout(tmp_path)
    session.start("count the files")
    follower = Follower(str(tmp_path))
    follower.open()
    [first] = rows_of(follower)
    assert (first.status, first.stats.turns, first.stats.last_message) == (
        "running", 0, "count the files")

    session.model_call(120, 30)
    session.tool_call("shell", "3 files")
    line = b'{"timestamp":"2026-01-01T00:00:00.000Z","type":"event_msg","payload":{"type":'
    session.write(line)  # the writer is mid-line
    assert follower.poll()
    [now] = rows_of(follower)
    assert (now.stats.turns, now.stats.input_tokens, now.stats.tool_calls) == (1, 120, 1)
    assert now.stats.note(running=True) is None  # a running writer's partial line is no damage
    session.write(b'"background_event","message":"hi"}}\n')
    session.complete("3 files")
    assert follower.poll()
    [done] = rows_of(follower)
    assert (done.status, done.stats.last_message, done.stats.bad_lines) == (
        "completed", "3 files", 0)
    assert not follower.poll()  # nothing new: nothing read
    assert follower.bytes_read == session.path.stat().st_size  # every byte read exactly once


def test_a_new_child_file_appears_under_its_parent(tmp_path: Path) -> None:
    parent = Rollout(tmp_path)
    parent.start("fan out")
    follower = Follower(str(tmp_path))
    follower.open()
    assert len(rows_of(follower)) == 1
    made = day_folder(tmp_path) / f"rollout-2026-01-01T00-00-00-{ODD}ff.jsonl"
    made.touch()  # made, line 1 not written yet: not shown as damaged while it is so new
    assert not follower.poll()
    child = Rollout(tmp_path, parent=parent, profile="tester")
    child.start("test it")
    child.model_call(50, 5)
    assert follower.poll()
    rows = rows_of(follower)
    assert [r.stats.session_id for r in rows] == [parent.id, child.id]
    assert (rows[1].depth, rows[1].stats.profile, rows[1].status) == (1, "tester", "running")
    assert rows[0].totals is not None
    assert (rows[0].totals.sessions, rows[0].totals.running, rows[0].totals.input_tokens) == (
        2, 2, 50)


def test_the_first_session_of_an_empty_home_shows_at_the_next_poll(tmp_path: Path) -> None:
    follower = Follower(str(tmp_path))
    follower.open()  # no sessions/ folder yet, so no day folder to look at
    Rollout(tmp_path).start("first of the day")
    assert follower.poll()  # today's folder is looked for at every poll
    assert [r.stats.last_message for r in rows_of(follower)] == ["first of the day"]


def test_an_ended_session_that_is_resumed_runs_again(tmp_path: Path) -> None:
    session = Rollout(tmp_path)
    session.start("first task")
    session.complete("done")
    follower = Follower(str(tmp_path))
    follower.open()
    assert [r.status for r in rows_of(follower)] == ["completed"]
    session.turn = "turn-2"
    session.start("and now this")  # a resume appends a new task to the same file
    for _ in range(4):  # ended sessions are looked at every fourth poll
        follower.poll()
    assert [(r.status, r.stats.last_message) for r in rows_of(follower)] == [
        ("running", "and now this")]


def test_a_session_whose_writer_died_is_interrupted(tmp_path: Path) -> None:
    Rollout(tmp_path, pid=dead_pid()).start("work")
    follower = Follower(str(tmp_path))
    follower.open()
    [only] = rows_of(follower)
    assert only.status == "interrupted"


# -- a long rollout ----------------------------------------------------------------------------
def test_once_reads_a_20_mb_rollout_to_its_end_in_bounded_memory(tmp_path: Path) -> None:
    session = long_rollout(tmp_path / "big")
    size = session.path.stat().st_size
    whole = read_rollout(session.path)  # the whole-file reader: what the row must say
    counts = whole.events("token_count")
    total = counts[-1]["info"]["total_token_usage"]
    calls = [i for i in whole.response_items() if i["type"] == "function_call"]
    assert whole.status == "completed" and size >= 20 << 20 and len(counts) > 50
    small = Rollout(tmp_path / "small", pid=dead_pid())
    small.start("a short one")
    small.model_call(10, 1)
    small.complete("done")

    out, peak = once_process(tmp_path / "big")
    [line] = out.splitlines()[1:]
    assert line.split()[3:8] == [
        "completed", str(len(counts)), amount(total["input_tokens"]),
        amount(total["output_tokens"]), str(len(calls))]
    assert "!" not in line and line.endswith("every log read")  # no torn last line
    _, floor = once_process(tmp_path / "small")
    assert peak - floor < size // 4 // 1024, (peak, floor)  # KiB: streamed, never held whole


def test_a_long_rollout_shows_loading_until_caught_up_never_a_false_state(
    tmp_path: Path,
) -> None:
    session = long_rollout(tmp_path)
    size = session.path.stat().st_size
    follower = Follower(str(tmp_path))  # the live view's follower: a few MB a poll
    follower.open()
    seen = []
    for _ in range(size // (1 << 20)):
        [now] = rows_of(follower)
        seen.append((now.status, now.stats.note(False)))
        if now.status != "loading":
            break
        assert follower.poll()
    assert seen[0] == ("loading", None) and len(seen) > 2
    assert set(seen[:-1]) == {("loading", None)}  # never interrupted, never a torn line
    assert seen[-1] == ("completed", None)
    assert (now.stats.turns, now.stats.input_tokens, now.stats.last_message) == (
        len(read_rollout(session.path).events("token_count")), session.tokens[0],
        "every log read")
    assert follower.bytes_read == size


# -- damaged files ---------------------------------------------------------------------------
def test_damaged_files_are_marked_and_nothing_crashes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = Rollout(tmp_path, pid=dead_pid())
    good.start("fine so far")
    good.write(b"this is not JSON\n")
    good.model_call(10, 1)
    good.message("assistant", "wiped\x1b[2J\nthe screen")  # no escape reaches the terminal
    good.write(b'{"timestamp":"2026-01-01T00:00:00.000Z","type":"event_msg","pay')  # crash
    folder = day_folder(tmp_path)
    names = {}
    for at, (what, data) in enumerate([
        ("empty", b""),
        ("not json", b"\x00\xffgarbage\nmore\n"),
        ("no meta", b'{"timestamp":"x","type":"event_msg","payload":{"type":"task_started"}}\n'),
        ("torn meta", b'{"timestamp":"x","type":"session_meta","payload":{"id":'),
    ]):
        key = f"{ODD}{at:02d}"
        (folder / f"rollout-2026-01-01T00-00-00-{key}.jsonl").write_bytes(data)
        names[key] = what
    os.symlink(good.path, folder / f"rollout-2026-01-01T00-00-00-{ODD}0f.jsonl")
    follower = Follower(str(tmp_path))
    follower.open()
    rows = rows_of(follower)
    assert len(rows) == 6
    notes = {r.stats.key: (r.status, r.stats.note(False)) for r in rows}
    assert notes[good.id] == ("interrupted", "1 unreadable line, torn last line")
    assert notes[f"{ODD}00"] == (DAMAGED, "empty file")
    for key in (f"{ODD}01", f"{ODD}02"):
        assert notes[key] == (DAMAGED, "not a subsessions rollout (no session_meta first line)")
    assert notes[f"{ODD}03"] == (DAMAGED, "no whole first line")
    status, note = notes[f"{ODD}0f"]
    assert status == DAMAGED and note is not None and note.startswith("cannot read")
    code, out, err = once(tmp_path, capsys=capsys)
    assert code == 0, err
    assert out.count("damaged") == 5
    assert "\x1b" not in out and "wiped?[2J the screen" in out
    assert out.count("! ") == 6


def test_a_file_with_no_line_end_is_not_held_in_memory(tmp_path: Path) -> None:
    folder = day_folder(tmp_path)
    (folder / f"rollout-2026-01-01T00-00-00-{ODD}00.jsonl").write_bytes(b"x" * (65 << 20))
    follower = Follower(str(tmp_path))
    follower.open()
    for _ in range(20):  # 8 MB a poll
        if not follower.poll():
            break
    [stats] = follower.sessions.values()
    assert (stats.status(follower.alive), stats.note(False)) == (
        DAMAGED, "a line longer than 64 MB")
    assert stats.torn == b"" and stats.offset == 65 << 20


# -- Codex's own rollouts --------------------------------------------------------------------
def test_codex_cli_rollouts_show_with_their_sub_agent_under_its_parent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = codex_home(tmp_path / "codex")
    code, out, err = once(home, capsys=capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert "!" not in out  # Codex's record kinds this reader does not know are not damage
    spawner = next(at for at, line in enumerate(lines) if line.rstrip().endswith("spawned"))
    child = lines[spawner + 1].split()
    assert lines[spawner + 1].startswith("  01a20748-f09")
    assert child[1:7] == ["Tesla", "gpt-5.4", "interrupted", "1", "124", "7"]
    assert "2 · 369/21 · 1" in lines[spawner]
    failed = next(line for line in lines if " failed " in line)
    assert failed.endswith("error: stream disconnected before completion: scripted failure")


# -- the window over a big home ----------------------------------------------------------------
def test_the_window_holds_the_newest_trees_and_reaches_back_for_an_old_parent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trees = []
    for n in range(4):
        root = Rollout(tmp_path)
        root.start(f"tree {n}")
        kid = Rollout(tmp_path, parent=root)
        kid.start(f"kid {n}")
        trees.append((root, kid))
    follower = Follower(str(tmp_path), limit=2)
    follower.open()
    assert [r.stats.session_id for r in rows_of(follower)] == [
        trees[3][0].id, trees[3][1].id, trees[2][0].id, trees[2][1].id]
    assert follower.hidden == 4
    code, out, err = once(tmp_path, "--limit", "1", capsys=capsys)
    assert code == 0
    assert len(out.splitlines()) == 1 + 2
    assert "(6 older session(s) not shown" in err
    late = Rollout(tmp_path, parent=trees[0][0])  # the oldest tree spawns again
    late.start("late kid")
    assert follower.poll()
    rows = rows_of(follower)
    assert follower.hidden == 0
    assert [r.stats.session_id for r in rows][-3:] == [trees[0][0].id, trees[0][1].id, late.id]
    assert rows[-3].totals is not None and rows[-3].totals.sessions == 3

    code, out, err = once(tmp_path, "--limit", "1", capsys=capsys)  # the newest is the late kid
    assert (code, len(out.splitlines()), err) == (0, 1 + 9, "")
    code, out, err = once(tmp_path, trees[1][0].id[:20], capsys=capsys)
    assert code == 0, err
    assert len(out.splitlines()) == 1 + 2
    one = Follower(str(tmp_path), root=trees[1][0].id[:20])
    one.open()
    assert [r.stats.session_id for r in rows_of(one)] == [trees[1][0].id, trees[1][1].id]
    assert one.hidden == 7


# -- the command -------------------------------------------------------------------------------
def test_once_and_import_never_load_textual(tmp_path: Path) -> None:
    Rollout(tmp_path).start("x")
    code = (
        "import sys, subsessions\n"
        "from subsessions.cli import main\n"
        f"assert main(['watch', '--once', '--home', {str(tmp_path)!r}]) == 0\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": REPO})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


def test_without_textual_the_live_view_says_how_to_get_it(tmp_path: Path) -> None:
    Rollout(tmp_path).start("x")
    code = (
        "import sys\n"
        "sys.modules['textual'] = None  # as if the [watch] extra were not installed\n"
        "from subsessions.cli import main\n"
        f"sys.exit(main(['watch', '--home', {str(tmp_path)!r}]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": REPO})
    assert done.returncode == 1
    assert done.stderr == (
        "subsessions: the live view needs Textual: pip install 'subsessions[watch]' "
        "(or print the tree once with --once)\n")


@pytest.mark.parametrize(("args", "says"), [
    (["--limit", "-1"], "--limit must be 0 (all) or more"),
    (["01a2ffff"], "unknown session 01a2ffff"),
    ([], "the live view needs a terminal; use --once in a pipe"),
])
def test_bad_input_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    Rollout(tmp_path).start("x")
    assert main(["watch", "--home", str(tmp_path), *args]) == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("subsessions: ") and says in line


def test_a_missing_home_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["watch", "--once", "--home", str(tmp_path / "nowhere")]) == 1
    assert "no such directory" in capsys.readouterr().err
