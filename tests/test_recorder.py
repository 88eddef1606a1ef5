"""RolloutWriter and RolloutRecorder: whole lines, Codex paths, private files, durable flushes."""

from __future__ import annotations

import asyncio
import os
import random
import re
import stat
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from subsessions.errors import RolloutError
from subsessions.rollouts import recorder as recorder_module
from subsessions.rollouts.recorder import RolloutRecorder, RolloutWriter, rollout_path

SID = "01a1fe50-46e5-76bd-9def-b2b03eae7f6a"
STAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")


def lines(path: str | Path) -> list[dict]:
    data = Path(path).read_bytes()
    assert data == b"" or data.endswith(b"\n"), "the file must end with a whole line"
    return [orjson.loads(line) for line in data.splitlines()]


def writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "rollout-writer"]


def test_rollout_path_layout(home: Path) -> None:
    started = time.mktime((2026, 3, 4, 5, 6, 7, 0, 0, -1))  # local time, as DESIGN 3.5 says
    expected = home / "sessions/2026/03/04" / f"rollout-2026-03-04T05-06-07-{SID}.jsonl"
    assert Path(rollout_path(home, SID, started)) == expected


async def test_lines_are_whole_json_envelopes(home: Path) -> None:
    writer = RolloutWriter()
    try:
        path = rollout_path(home, SID, time.time())
        recorder = RolloutRecorder(writer, path)
        recorder.record("session_meta", {"id": SID})
        recorder.record("response_item", {"type": "message", "text": "two\nlines, é, \"q\""})
        recorder.event({"type": "task_complete", "last_agent_message": None})
        await recorder.flush_durable()
        got = lines(path)
        assert [r["type"] for r in got] == ["session_meta", "response_item", "event_msg"]
        assert got[1]["payload"]["text"] == "two\nlines, é, \"q\""
        assert got[2]["payload"] == {"type": "task_complete", "last_agent_message": None}
        for record in got:
            assert set(record) == {"timestamp", "type", "payload"}
            assert STAMP.fullmatch(record["timestamp"]), record["timestamp"]
            written = datetime.strptime(record["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ")
            drift = abs(written.replace(tzinfo=UTC) - datetime.now(UTC)).total_seconds()
            assert drift < 60, "timestamps are UTC"
    finally:
        await writer.aclose()


async def test_files_are_0600_and_directories_0700(home: Path) -> None:
    writer = RolloutWriter()
    try:
        path = Path(rollout_path(home, SID, time.time()))
        recorder = RolloutRecorder(writer, str(path))
        recorder.record("session_meta", {"id": SID})
        await recorder.flush_durable()
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        day = path.parent
        for folder in (day, day.parent, day.parent.parent, home / "sessions"):
            assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700, folder
    finally:
        await writer.aclose()


async def test_flush_durable_resolves_after_bytes_are_in_file(home: Path) -> None:
    writer = RolloutWriter()
    try:
        path = rollout_path(home, SID, time.time())
        recorder = RolloutRecorder(writer, path)
        for n in range(100):
            recorder.event({"type": "agent_message", "message": str(n)})
            await recorder.flush_durable()
            got = lines(path)
            assert len(got) == n + 1
            assert got[-1]["payload"]["message"] == str(n)
    finally:
        await writer.aclose()


async def test_order_is_kept_across_many_flushes_and_files(tmp_path: Path) -> None:
    writer = RolloutWriter()
    try:
        recorders = [RolloutRecorder(writer, str(tmp_path / f"r{i}.jsonl")) for i in range(3)]
        for n in range(600):
            recorder = recorders[n % 3]
            recorder.event({"type": "agent_message", "message": n})
            if n % 7 == 0:
                recorder.flush()
            if n % 50 == 0:
                await asyncio.sleep(0)  # let the writer take partial batches
        await asyncio.gather(*(r.flush_durable() for r in recorders))
        for i, recorder in enumerate(recorders):
            got = [r["payload"]["message"] for r in lines(recorder.path)]
            assert got == list(range(i, 600, 3))
    finally:
        await writer.aclose()


@pytest.mark.parametrize("slow_disk", [False, True])
async def test_endings_written_on_the_loop_keep_each_files_order(
        tmp_path: Path, slow_disk: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Small durable chunks may be appended on the loop when the thread has nothing in hand;
    mixed with queued and large chunks, every file still has its lines in submit order (and a
    disk slow enough to stall the loop sends everything to the thread from then on)."""
    if slow_disk:
        monkeypatch.setattr(recorder_module, "INLINE_SECONDS", -1.0)
    chooser = random.Random(19)
    writer = RolloutWriter()
    try:
        recorders = [RolloutRecorder(writer, str(tmp_path / f"r{i}.jsonl")) for i in range(3)]
        durable = []
        for n in range(900):
            recorder = recorders[chooser.randrange(3)]
            size = chooser.choice((1, 1, 1, 40_000))  # now and then past INLINE_BYTES
            recorder.event({"type": "agent_message", "message": n, "pad": "x" * size})
            step = chooser.random()
            if step < 0.3:
                durable.append(recorder.flush_durable())
            elif step < 0.5:
                recorder.flush()
            if step > 0.9:
                await asyncio.sleep(chooser.choice((0, 0.001)))
        await asyncio.gather(*durable, *(r.flush_durable() for r in recorders))
        seen = [[r["payload"]["message"] for r in lines(rec.path)] for rec in recorders]
        assert sorted(n for file in seen for n in file) == list(range(900))
        assert all(file == sorted(file) for file in seen)
        assert writer._inline is not slow_disk
    finally:
        await writer.aclose()


async def test_unwritable_path_fails_its_flush_and_others_keep_working(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a regular file, not a directory")
    writer = RolloutWriter()
    try:
        bad = RolloutRecorder(writer, str(blocker / "sessions" / "rollout-x.jsonl"))
        good = RolloutRecorder(writer, str(tmp_path / "ok" / "rollout-y.jsonl"))
        bad.event({"type": "task_started"})
        good.event({"type": "task_started"})
        bad_flush, good_flush = bad.flush_durable(), good.flush_durable()
        with pytest.raises(RolloutError) as caught:
            await bad_flush
        assert caught.value.path == bad.path
        assert bad.path in str(caught.value)
        await good_flush
        good.event({"type": "task_complete"})
        await good.flush_durable()
        assert [r["payload"]["type"] for r in lines(good.path)] == ["task_started", "task_complete"]
    finally:
        await writer.aclose()


async def test_a_transient_failure_does_not_fail_later_flushes(tmp_path: Path) -> None:
    blocker = tmp_path / "sessions"
    blocker.write_text("in the way for a moment")
    writer = RolloutWriter()
    try:
        recorder = RolloutRecorder(writer, str(blocker / "rollout-x.jsonl"))
        recorder.event({"type": "task_started"})
        with pytest.raises(RolloutError):
            await recorder.flush_durable()
        blocker.unlink()  # the problem goes away (disk space freed, directory fixed...)
        recorder.event({"type": "task_complete"})
        await recorder.flush_durable()  # these bytes reach the file, so this must not raise
        assert [r["payload"]["type"] for r in lines(recorder.path)] == ["task_complete"]
    finally:
        await writer.aclose()


async def test_aclose_drains_the_queue_and_stops_the_thread(home: Path) -> None:
    writer = RolloutWriter()
    path = rollout_path(home, SID, time.time())
    recorder = RolloutRecorder(writer, path)
    try:
        for n in range(1000):
            recorder.event({"type": "agent_message", "message": n})
            if n % 10 == 9:
                recorder.flush()  # handed over, never awaited
        assert writer_threads()
    finally:
        await writer.aclose()
    assert [r["payload"]["message"] for r in lines(path)] == list(range(1000))
    assert not writer_threads()
    await writer.aclose()  # idempotent


async def test_submit_after_aclose_raises(home: Path) -> None:
    writer = RolloutWriter()
    recorder = RolloutRecorder(writer, rollout_path(home, SID, time.time()))
    try:
        recorder.event({"type": "task_started"})
        await recorder.flush_durable()
    finally:
        await writer.aclose()
    with pytest.raises(RuntimeError, match="closed"):
        writer.submit(recorder.path, b"{}\n", None)
    recorder.event({"type": "task_complete"})
    with pytest.raises(RuntimeError, match="closed"):
        recorder.flush_durable()
    assert len(lines(recorder.path)) == 1


async def test_no_descriptor_is_held_per_session(home: Path) -> None:
    writer = RolloutWriter()
    try:
        warm = RolloutRecorder(writer, rollout_path(home, "warm-up", time.time()))
        warm.event({"type": "task_started"})
        await warm.flush_durable()
        before = len(os.listdir("/proc/self/fd"))
        recorders = [
            RolloutRecorder(writer, rollout_path(home, f"{SID[:-4]}{n:04d}", time.time()))
            for n in range(300)
        ]
        for _ in range(2):
            for recorder in recorders:
                recorder.event({"type": "agent_message", "message": "x"})
            await asyncio.gather(*(r.flush_durable() for r in recorders))
        after = len(os.listdir("/proc/self/fd"))
        assert after - before < 10, f"{after - before} descriptors held after 300 sessions"
        assert all(len(lines(r.path)) == 2 for r in recorders)
    finally:
        await writer.aclose()
