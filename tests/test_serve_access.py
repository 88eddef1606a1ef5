"""Who may name which session on `subsessions serve` (issue 25, items 1-3), attacked from a
second connection as an outside host would: full ids only, nothing another connection holds,
no paths, and an id it may not see is answered as one that does not exist."""

from __future__ import annotations

import os
import shutil
import signal
import uuid
from pathlib import Path
from typing import Any

from fake_openai import FakeOpenAI, fake_openai, text
from openai_support import rollouts
from serve_raw import Raw, Runtimes, dial, end_of, runtimes

from subsessions.errors import echo
from subsessions.rollouts import find_rollout

__all__ = ["fake_openai", "runtimes"]


def twin_ids() -> tuple[str, str]:
    """Two UUIDs that share their first 8 characters (a prefix matching both)."""
    head = str(uuid.uuid4())[:8]
    return (head + str(uuid.uuid4())[8:], head + str(uuid.uuid4())[8:])


async def used(host: Raw, session_id: str) -> None:
    """A session with a rollout on disk: created, then one message answered."""
    assert (await host.call("session.create", {"sessionId": session_id}))["result"]
    done = await host.call("session.sendAndWait", {"sessionId": session_id, "prompt": "hi"})
    assert done["result"]["aborted"] is False, done


def unknown(answer: dict[str, Any], named: str) -> None:
    """Answered exactly as an id that exists nowhere."""
    assert answer.get("error", {}).get("message") == f"unknown session {echo(named)}", answer


async def test_another_connection_cannot_delete_resume_or_probe_a_session(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, runtimes: Runtimes
) -> None:
    fake_openai.script = lambda request: text("ok")
    proc, port = await runtimes.tcp(home, fake_openai, tmp_path)
    alice, mallory = await dial(port), await dial(port)
    first, second = twin_ids()
    for session_id in (first, second):
        await used(alice, session_id)
    files = {sid: find_rollout(home, sid) for sid in (first, second)}
    nowhere = str(uuid.uuid4())

    # Deleting by prefix or full id: refused as "unknown", no id named, nothing deleted.
    for named in (first[:6], first[:8], first[:-1], first, first.upper(), nowhere):
        answer = (await mallory.call("session.delete", {"sessionId": named}))["result"]
        assert answer == {"success": False, "error": f"unknown session {named}"}
    for named in (first[:8], first, nowhere, "../x", first + ".jsonl"):
        unknown(await mallory.call("session.resume", {"sessionId": named}), named)
        for method in ("session.send", "session.abort", "session.detach", "session.getMessages"):
            unknown(await mallory.call(method, {"sessionId": named, "prompt": "x"}), named)
        meta = await mallory.call("session.getMetadata", {"sessionId": named})
        assert meta["result"] == {"session": None}
    assert all(path.exists() for path in files.values())
    assert (await mallory.call("session.list"))["result"] == {"sessions": []}

    # Alice's sessions are untouched and still answer.
    again = await alice.call("session.sendAndWait", {"sessionId": first, "prompt": "again"})
    assert again["result"]["response"]["data"]["content"] == "ok"

    # At rest (detached), a full id is the capability; a prefix still names nothing.
    assert (await alice.call("session.detach", {"sessionId": second}))["result"]
    answer = (await mallory.call("session.delete", {"sessionId": second[:8]}))["result"]
    assert answer == {"success": False, "error": f"unknown session {second[:8]}"}
    resumed = await mallory.call("session.resume", {"sessionId": second})
    assert resumed["result"]["sessionId"] == second
    assert (await mallory.call("session.delete", {"sessionId": second}))["result"] == {
        "success": True}
    assert not files[second].exists() and files[first].exists()
    for host in (alice, mallory):
        await host.close()
    os.kill(proc.pid, signal.SIGTERM)
    code, err = await end_of(proc)
    assert code == 128 + signal.SIGTERM, err


async def test_resume_takes_no_path_inside_or_outside_the_home(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, runtimes: Runtimes
) -> None:
    fake_openai.script = lambda request: text("ok")
    proc, port = await runtimes.tcp(home, fake_openai, tmp_path)
    host = await dial(port)
    session_id = str(uuid.uuid4())
    await used(host, session_id)
    assert (await host.call("session.detach", {"sessionId": session_id}))["result"]
    inside = find_rollout(home, session_id)
    outside = tmp_path / "elsewhere" / inside.name
    outside.parent.mkdir()
    shutil.copyfile(inside, outside)
    before = outside.read_bytes()
    for named in (str(outside), str(inside), inside.name, f"../{inside.name}",
                  f"sessions/{session_id}"):
        unknown(await host.call("session.resume", {"sessionId": named}), named)
        answer = (await host.call("session.delete", {"sessionId": named}))["result"]
        assert answer == {"success": False, "error": f"unknown session {echo(named)}"}
    assert outside.read_bytes() == before and inside.exists()
    assert list(rollouts(home)) == [session_id]
    await host.close()
    os.kill(proc.pid, signal.SIGTERM)
    code, err = await end_of(proc)
    assert code == 128 + signal.SIGTERM, err


def plant_links(day: Path, targets: list[Path]) -> dict[str, Path]:
    """A symlink named like a rollout (a fresh id) in the home's day folder, to each target."""
    links = {}
    for target in targets:
        session_id = str(uuid.uuid4())
        link = day / f"rollout-2026-01-01T00-00-00-{session_id}.jsonl"
        link.symlink_to(target)
        links[session_id] = link
    return links


async def test_a_symlink_named_like_a_rollout_is_no_session(
    home: Path, tmp_path: Path, fake_openai: FakeOpenAI, runtimes: Runtimes
) -> None:
    """A link planted in the home, to a rollout outside it, to one inside it or to any other
    file, is neither resumed nor deleted: `unknown session`, link and target untouched."""
    fake_openai.script = lambda request: text("ok")
    proc, port = await runtimes.tcp(home, fake_openai, tmp_path)
    host = await dial(port)
    session_id = str(uuid.uuid4())
    await used(host, session_id)
    assert (await host.call("session.detach", {"sessionId": session_id}))["result"]
    inside = find_rollout(home, session_id)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    outside = elsewhere / inside.name
    shutil.copyfile(inside, outside)
    secret = elsewhere / "secret.txt"
    secret.write_text("not a rollout\n")
    links = plant_links(inside.parent, [outside, inside, secret])
    before = {path: path.read_bytes() for path in (inside, outside, secret)}

    for named, link in links.items():
        unknown(await host.call("session.resume", {"sessionId": named}), named)
        answer = (await host.call("session.delete", {"sessionId": named}))["result"]
        assert answer == {"success": False, "error": f"unknown session {named}"}
        assert link.is_symlink() and link.readlink() in before
    assert {path: path.read_bytes() for path in before} == before
    assert (await host.call("session.list"))["result"] == {"sessions": []}
    await host.close()
    os.kill(proc.pid, signal.SIGTERM)
    code, err = await end_of(proc)
    assert code == 128 + signal.SIGTERM, err
