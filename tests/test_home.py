"""A home only its owner can write: refused otherwise, and no write follows a planted name.

Run as root, "another user" is uid 65534 (nobody), given the folder by `chown`.
Every home here is made under `tmp_path`, inside the sticky, root-owned `/tmp`: only
the home and the folders made in it are judged, never their parents.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from subsessions import Engine, ScriptedModel, SessionConfig, UnsafeHome
from subsessions.errors import ProfileError, RolloutError
from subsessions.profiles import load_profiles
from subsessions.rollouts import list_rollouts
from subsessions.rollouts.recorder import RolloutRecorder, RolloutWriter, rollout_path

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a folder away")


def engine(home: Path) -> Engine:
    return Engine(home, model_client=ScriptedModel(lambda request: ["ok"]))


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The console entry, with 1 GiB of memory and 30 s: a profile read forever fails fast."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    env = {**os.environ, "SUBSESSIONS_HOME": str(cwd / "default-home")}
    return subprocess.run(
        [sys.executable, "-m", "subsessions", *args], cwd=cwd, env=env, capture_output=True,
        text=True, timeout=30, check=False, preexec_fn=limit,
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    return result.stderr


async def test_a_new_home_and_its_sessions_folder_are_made_private(home: Path) -> None:
    async with engine(home) as e:
        modes = [os.stat(folder).st_mode & 0o777 for folder in (home, home / "sessions")]
        assert modes == [0o700, 0o700]  # made before any write: nobody can plant them between
        session = await e.create_session()
        await session.send_and_wait("hi")
    assert os.stat(session.recorder.path).st_mode & 0o777 == 0o600


@pytest.mark.parametrize("folder", ["", "sessions"])
async def test_a_home_others_can_write_is_refused(home: Path, folder: str) -> None:
    (home / "sessions").mkdir(parents=True)
    (home / folder).chmod(0o777)
    with pytest.raises(UnsafeHome) as caught:
        engine(home)
    message = str(caught.value)
    assert message.startswith(f"refusing home {home}: ")
    assert f"{home / folder} is writable by other users (mode 0777)" in message
    assert "\n" not in message
    (home / folder).chmod(0o770)  # group-writable is just as open
    with pytest.raises(UnsafeHome, match="mode 0770"):
        engine(home)
    assert not list((home / "sessions").iterdir())  # nothing was written


@as_root
@pytest.mark.parametrize("folder", ["", "sessions"])
async def test_a_home_owned_by_another_user_is_refused(home: Path, folder: str) -> None:
    (home / "sessions").mkdir(parents=True, mode=0o700)
    os.chown(home / folder, NOBODY, NOBODY)
    with pytest.raises(UnsafeHome) as caught:
        engine(home)
    assert f"{home / folder} is owned by uid {NOBODY}, not by you (uid 0)" in str(caught.value)


def test_the_cli_refuses_a_shared_home_in_one_line(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    result = cli("demo", "--home", str(shared), cwd=tmp_path)
    error = one_line_error(result)
    assert error.startswith(f"subsessions: refusing home {shared}: "), error
    assert "writable by other users" in error
    assert not (shared / "sessions" / "index.jsonl").exists()
    assert not any(shared.rglob("rollout-*.jsonl"))


async def test_a_rollout_is_never_written_through_a_planted_symlink(home: Path) -> None:
    victim = home.parent / "victim.txt"
    victim.write_bytes(b"precious\n")
    path = rollout_path(home, "01a1fe50-46e5-76bd-9def-b2b03eae7f6a", time.time())
    os.makedirs(os.path.dirname(path))
    os.symlink(victim, path)
    writer = RolloutWriter()
    try:
        recorder = RolloutRecorder(writer, path)
        recorder.record("session_meta", {"id": "x"})
        with pytest.raises(RolloutError, match="cannot write rollout"):
            await recorder.flush_durable()
    finally:
        await writer.aclose()
    assert victim.read_bytes() == b"precious\n"


async def many_rollouts(home: Path, count: int) -> None:
    """`count` finished children: enough for a listing to keep its index."""
    async with engine(home) as e:
        parent = await e.create_session(SessionConfig(max_children=count))
        manager = parent.subsessions
        ids = [await manager.spawn_child("mathematician", "hi") for _ in range(count)]
        for child in ids:
            await manager.wait_child(child)


async def test_the_index_is_not_written_through_a_planted_temporary_name(home: Path) -> None:
    await many_rollouts(home, 140)
    victim = home.parent / "victim.txt"
    victim.write_bytes(b"precious\n")
    sessions = home / "sessions"
    # The name the index used to be rewritten through, planted where only root (we) can.
    (sessions / f"index.jsonl.{os.getpid()}.tmp").symlink_to(victim)
    rows = list_rollouts(home)
    assert len(rows) == 141
    assert victim.read_bytes() == b"precious\n"
    index = sessions / "index.jsonl"
    assert not index.is_symlink()
    lines = index.read_bytes().splitlines()
    assert orjson.loads(lines[0]) == {"index": "subsessions-rollouts", "version": 1}
    assert len(lines) > 1  # the entries past the first 128, read directly
    assert not [p.name for p in sessions.iterdir() if p.name.endswith(".tmp")
                and not p.is_symlink()]  # no temporary file left behind


async def test_no_index_is_kept_in_a_sessions_folder_others_can_write(home: Path) -> None:
    await many_rollouts(home, 140)
    sessions = home / "sessions"
    sessions.chmod(0o777)  # a reader may still list it; it only keeps no cache there
    assert len(list_rollouts(home)) == 141
    assert not [p.name for p in sessions.iterdir() if p.name.startswith("index.jsonl")]


# -- profile files --------------------------------------------------------------------------


def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project" / ".subsessions" / "profiles"
    folder.mkdir(parents=True)
    return folder


def test_a_profile_linked_to_dev_zero_is_one_clear_line(tmp_path: Path) -> None:
    (project(tmp_path) / "zero.toml").symlink_to("/dev/zero")
    result = cli("profiles", "list", cwd=tmp_path / "project")
    error = one_line_error(result)
    assert "zero.toml: cannot read: a symbolic link, not a file" in error


def test_a_profile_that_is_a_fifo_does_not_hang(tmp_path: Path) -> None:
    os.mkfifo(project(tmp_path) / "pipe.toml")
    result = cli("profiles", "list", cwd=tmp_path / "project")
    error = one_line_error(result)
    assert "pipe.toml: cannot read: not a regular file" in error


def test_a_profile_larger_than_one_mebibyte_is_refused(tmp_path: Path) -> None:
    big = project(tmp_path) / "big.toml"
    big.write_text('name = "big"\ndescription = "' + "x" * (1 << 20) + '"\n')
    with pytest.raises(ProfileError, match=r"big\.toml: cannot read: larger than 1 MiB"):
        load_profiles(None, tmp_path / "project")
    big.write_text('name = "big"\ndescription = "' + "x" * 1000 + '"\n')
    assert load_profiles(None, tmp_path / "project")["big"].source == str(big)
