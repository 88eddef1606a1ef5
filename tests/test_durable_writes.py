"""What reaches the disk survives a kill or a full disk whole, in an order a reader can trust.

A parent killed with SIGKILL while spawning names only children whose rollouts exist;
an append that fails half-way (file size limit, full tmpfs) never glues the next record
onto a fragment.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
import pytest
from scripting import WORKER, Script, spawn_held
from scripting import script as script  # the fixture

from subsessions import ChildFailed, ChildStatus, Engine, SessionConfig
from subsessions.errors import RolloutError, UnknownSession
from subsessions.rollouts import recorder as recorder_module
from subsessions.rollouts.files import find_rollout, rollout_entries, temporary_name
from subsessions.rollouts.recorder import RolloutRecorder, RolloutWriter

SPAWNER = textwrap.dedent("""
    import asyncio, os, sys
    from subsessions import Engine, ScriptedModel, SessionConfig

    async def main(home, ready):
        model = ScriptedModel(lambda request: ["ok"])
        async with Engine(home, model_client=model) as engine:
            parent = await engine.create_session(SessionConfig(max_children=100_000))
            print(parent.recorder.path, flush=True)
            for i in range(ready + 300):
                child = await parent.subsessions.spawn_child("mathematician", "hi")
                if i % 4 == 3:
                    await asyncio.sleep(0)  # children run, the flusher hands lines over
                if i == ready:  # its spawn lines so far are on disk
                    await parent.recorder.flush_durable()
                elif i == ready + 1:
                    first = parent.subsessions.info(child).rollout_path
            parent.recorder.flush()  # 300 more heads and lines handed to the writer
            while not os.path.exists(first):  # it has started on them (bounded by the test)
                await asyncio.sleep(0.001)
            print("ready", flush=True)  # the writer creating the files as fast as it can
            await asyncio.Event().wait()

    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
""")


def records(path: str | Path, torn: bool = False) -> list[dict]:
    """Every line; with `torn`, the last may be torn (by a kill) and is left out."""
    lines = Path(path).read_bytes().split(b"\n")
    parsed = []
    for number, line in enumerate(lines):
        try:
            parsed.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            assert number == len(lines) - 1, f"line {number + 1} of {path} is not whole"
            assert torn or not line, f"{path} does not end with a whole line"
    return parsed


def spawned_then_killed(home: Path, ready: int) -> list[str]:
    """Kill a parent once `ready` children are spawned and on disk and the writer has started
    on 300 more (creating their files as fast as it can); the ids its rollout names."""
    child = subprocess.Popen(
        [sys.executable, "-c", SPAWNER, str(home), str(ready)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout is not None and child.stderr is not None
        parent_path = child.stdout.readline().strip()
        assert child.stdout.readline() == "ready\n", child.stderr.read()
        child.send_signal(signal.SIGKILL)  # while the writer is busy with the storm
    finally:
        child.kill()
        child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL
    prefix = "spawned child session "
    return [r["payload"]["message"].split()[3] for r in records(parent_path, torn=True)
            if r["type"] == "event_msg" and r["payload"].get("message", "").startswith(prefix)]


def killed_storms(tmp_path: Path,
                  points: tuple[int, ...]) -> list[tuple[int, Path, list[str]]]:
    """`spawned_then_killed` at each point, two storms at a time (one a core): the kill point,
    its home, and the ids the parent's rollout names."""
    homes = [tmp_path / f"home-{ready}" for ready in points]
    with ThreadPoolExecutor(2) as pool:
        return list(zip(points, homes, pool.map(spawned_then_killed, homes, points),
                        strict=True))


def test_a_killed_parent_names_only_children_whose_rollouts_exist(tmp_path: Path) -> None:
    # a kill early, and late in a long storm
    for ready, home, spawned in killed_storms(tmp_path, (200, 800, 2000, 4000)):
        assert len(spawned) > 0, "the parent wrote no spawn line before the kill"
        files = dict(rollout_entries(home))
        lost = []
        for session_id in spawned:
            path = files.get(session_id)
            first = records(path, torn=True)[:1] if path is not None else []
            if not first or first[0]["type"] != "session_meta" or (
                first[0]["payload"]["id"] != session_id
            ):
                lost.append(session_id)
        assert not lost, f"killed after {ready}: {len(lost)} of {len(spawned)} spawned " \
            "children have no rollout"


# -- failed appends -------------------------------------------------------------------------

FILE_SIZE_LIMITED = textwrap.dedent("""
    import asyncio, os, resource, signal, sys
    from subsessions.errors import RolloutError
    from subsessions.rollouts.recorder import RolloutRecorder, RolloutWriter

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a signal

    async def main(path):
        writer = RolloutWriter()
        recorder = RolloutRecorder(writer, path)
        recorder.record("session_meta", {"id": "limited"})
        await recorder.flush_durable()
        hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
        # Room for a part of the next chunk only: its first line whole, its second torn.
        resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(path) + 700, hard))
        recorder.event({"type": "kept", "text": "k" * 400})
        recorder.event({"type": "torn", "text": "t" * 4000})
        try:
            await recorder.flush_durable()
        except RolloutError as exc:
            print("first:", exc, flush=True)
        recorder.event({"type": "also lost", "text": "l" * 4000})
        try:
            await recorder.flush_durable()
        except RolloutError as exc:
            print("second:", exc, flush=True)
        resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))  # the space is back
        recorder.event({"type": "after"})
        await recorder.flush_durable()
        print("after: written", flush=True)
        await writer.aclose()

    asyncio.run(main(sys.argv[1]))
""")


def test_a_write_past_the_file_size_limit_leaves_only_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "rollout.jsonl"
    result = subprocess.run(
        [sys.executable, "-c", FILE_SIZE_LIMITED, str(path)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr
    kinds = [r["payload"].get("type") for r in records(path)]
    assert kinds == [None, "kept", "after"]  # session_meta, the whole line, the next record
    out = result.stdout.splitlines()
    assert out[0].startswith(f"first: {path}: cannot write rollout: File too large"), out
    assert "bytes of records lost" in out[0]
    assert out[1].startswith("second: "), out  # a write that failed again says so again
    assert out[2] == "after: written"


@contextlib.contextmanager
def tiny_tmpfs(folder: Path, size: str) -> Iterator[Path]:
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs",
                              str(folder)], capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def fill(folder: Path) -> Path:
    """A file taking every free block of the file system."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass  # full
    finally:
        os.close(fd)
    return filler


async def test_a_full_disk_then_room_again_leaves_only_whole_lines(tmp_path: Path) -> None:
    with tiny_tmpfs(tmp_path / "disk", "64k") as disk:
        path = str(disk / f"rollout-{uuid.uuid4()}.jsonl")
        writer = RolloutWriter()
        try:
            recorder = RolloutRecorder(writer, path)
            recorder.record("session_meta", {"id": "full"})
            await recorder.flush_durable()
            filler = fill(disk)
            # Past the slack of the file's one page: the write stops at the page's end.
            recorder.event({"type": "lost", "text": "x" * 20_000})
            with pytest.raises(RolloutError, match="No space left on device"):
                await recorder.flush_durable()
            filler.unlink()
            recorder.event({"type": "after"})
            await recorder.flush_durable()
        finally:
            await writer.aclose()
        kinds = [r["payload"].get("type") for r in records(path)]
    assert kinds == [None, "after"]


def heads(home: Path) -> dict[str, bytes]:
    """The first line of every rollout file on disk (b"" for an empty file)."""
    firsts = {}
    for session_id, path in rollout_entries(home):
        with open(path, "rb") as file:
            firsts[session_id] = file.readline()
    return firsts


@pytest.mark.timeout(240)  # 12 cold processes, each spawning up to 1,600 children before its kill
def test_every_rollout_on_disk_starts_with_its_session_meta_whenever_the_kill(
    tmp_path: Path,
) -> None:
    """Killed at 12 points of a spawning storm (the writer creating files as fast as it can),
    no file is ever empty or begins with anything but its own whole `session_meta`."""
    bad: list[str] = []
    points = (30, 60, 100, 150, 220, 300, 400, 550, 700, 900, 1200, 1600)
    for ready, home, _ in killed_storms(tmp_path, points):
        for session_id, first in heads(home).items():
            try:
                meta = orjson.loads(first)
            except orjson.JSONDecodeError:
                bad.append(f"killed after {ready}: {session_id} starts {first[:60]!r}")
                continue
            if meta["type"] != "session_meta" or meta["payload"]["id"] != session_id:
                bad.append(f"killed after {ready}: {session_id} starts with {meta['type']}")
    assert not bad, "\n".join(bad)


# -- new files appear whole -----------------------------------------------------------------

@pytest.mark.parametrize("anonymous", [True, False], ids=["O_TMPFILE", "named temporary"])
async def test_a_new_rollout_appears_with_its_first_chunk_and_leaves_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, anonymous: bool
) -> None:
    """Both ways of creating a file (the second is for file systems without O_TMPFILE, such
    as NFS): the folder holds the rollout only, 0600, its head first, later chunks after."""
    monkeypatch.setattr(recorder_module, "TMPFILE", recorder_module.TMPFILE and anonymous)
    folder = tmp_path / "sessions" / "2026" / "11" / "25"
    path = str(folder / f"rollout-2026-11-25T10-00-00-{uuid.uuid4()}.jsonl")
    writer = RolloutWriter()
    try:
        recorder = RolloutRecorder(writer, path)
        recorder.record("session_meta", {"id": "new"})
        await recorder.flush_durable()
        recorder.event({"type": "later"})
        await recorder.flush_durable()
    finally:
        await writer.aclose()
    assert os.listdir(folder) == [os.path.basename(path)]
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert [r["type"] for r in records(path)] == ["session_meta", "event_msg"]


async def test_a_head_the_full_disk_refused_still_comes_first_once_there_is_room(
    tmp_path: Path,
) -> None:
    with tiny_tmpfs(tmp_path / "disk", "64k") as disk:
        path = str(disk / f"rollout-{uuid.uuid4()}.jsonl")
        writer = RolloutWriter()
        try:
            filler = fill(disk)
            recorder = RolloutRecorder(writer, path)
            recorder.record("session_meta", {"id": "late", "text": "m" * 8000})
            with pytest.raises(RolloutError, match="No space left on device"):
                await recorder.flush_durable()
            assert os.listdir(disk) == ["filler"]  # no file rather than one without its head
            filler.unlink()
            recorder.event({"type": "after"})
            await recorder.flush_durable()
        finally:
            await writer.aclose()
        assert [r["type"] for r in records(path)] == ["session_meta", "event_msg"]
        assert os.listdir(disk) == [os.path.basename(path)]


def test_a_killed_writers_temporary_file_is_never_listed_and_is_removed_once_stale(
    tmp_path: Path,
) -> None:
    """What a writer killed between creating a temporary file and linking it leaves behind
    (on a file system without O_TMPFILE): no lister or `find` sees it; an old one is
    removed; a young one may be another host's write in flight, and is left alone."""
    home = tmp_path / "home"
    folder = home / "sessions" / "2026" / "11" / "25"
    folder.mkdir(parents=True)
    kept_id, stale_id, young_id = (str(uuid.uuid4()) for _ in range(3))
    kept = folder / f"rollout-2026-11-25T10-00-00-{kept_id}.jsonl"
    kept.write_bytes(orjson.dumps({"type": "session_meta", "payload": {"id": kept_id}}) + b"\n")
    stale = Path(temporary_name(str(folder / f"rollout-2026-11-25T10-00-01-{stale_id}.jsonl")))
    young = Path(temporary_name(str(folder / f"rollout-2026-11-25T10-00-02-{young_id}.jsonl")))
    for leftover in (stale, young):
        leftover.write_bytes(b'{"timestamp":"2026-11-25T10:00:01.000Z","type":"session_meta"')
    hours_ago = time.time() - 2 * 3600
    os.utime(stale, (hours_ago, hours_ago))
    assert rollout_entries(home) == [(kept_id, str(kept))]
    assert not stale.exists() and young.exists()
    for other in (stale_id, young_id):
        with pytest.raises(UnknownSession):
            find_rollout(home, other)


async def test_a_child_whose_ending_never_reached_its_rollout_fails_naming_the_rollout(
    home: Path, script: Script
) -> None:
    """Its answer came, but its file could not take its ending (root or not: the name is a
    directory now): the child still ends, failed with the rollout's name, never done."""
    async with Engine(home, model_client=script.model) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,)))
        manager = parent.subsessions
        cid = await spawn_held(parent, script, "job")
        [child] = manager.tree()
        await child.flush_durable()  # its first lines are in its file
        path = Path(manager.info(cid).rollout_path)
        kept = path.with_name("kept.jsonl")
        os.replace(path, kept)
        os.mkdir(path)
        try:
            script.answer("job", ["all done"])
            with pytest.raises(ChildFailed) as failed:
                await manager.wait_child(cid, timeout=10)
            assert manager.status(cid) is ChildStatus.FAILED
            assert failed.value.error.startswith(f"{path}: cannot write rollout: ")
        finally:
            os.rmdir(path)
            os.replace(kept, path)
    kinds = [r["payload"].get("type") for r in records(path)]
    assert kinds[0] is None and "task_started" in kinds and "task_complete" not in kinds
