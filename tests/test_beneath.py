"""`beneath.DirHandles` and `patch_commit.commit`: what was checked is what is written,
even when a directory on the path became a symlink after the check."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from subsessions.tools.beneath import DirHandles, PathChanged
from subsessions.tools.errors import FileToolError, WriteNotAllowed
from subsessions.tools.patch_commit import Change, Original, commit


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path]:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    (ws / "sub").mkdir(parents=True)
    outside.mkdir()
    return ws.resolve(), outside.resolve()


def allow_all(path: str) -> None:
    return None


def test_a_symlink_component_is_refused_by_name(places: tuple[Path, Path]) -> None:
    ws, outside = places
    (ws / "link").symlink_to(outside)
    (ws / "file").write_text("x")
    with DirHandles() as handles:
        with pytest.raises(PathChanged, match=f"^{ws}/link is a symbolic link$"):
            handles.directory(f"{ws}/link/deeper")
        with pytest.raises(PathChanged, match=f"^{ws}/file is not a directory$"):
            handles.directory(f"{ws}/file/x")
        with pytest.raises(FileNotFoundError):
            handles.directory(f"{ws}/missing/x")
        with pytest.raises(ValueError, match="not an absolute normalised path"):
            handles.directory(f"{ws}/sub/../link")
        assert os.path.samestat(os.fstat(handles.directory(f"{ws}/sub")), (ws / "sub").stat())


def test_handles_are_bounded(places: tuple[Path, Path]) -> None:
    ws, _ = places
    for i in range(20):
        (ws / f"d{i}").mkdir()
    before = len(os.listdir("/proc/self/fd"))
    with DirHandles(keep=4) as handles:
        for i in range(20):
            handles.directory(f"{ws}/d{i}")
        assert len(os.listdir("/proc/self/fd")) <= before + 4
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_directory_swapped_after_the_check_fails_the_commit(places: tuple[Path, Path]) -> None:
    """The plan saw `sub` as a directory; when the writes come it is a symlink outside."""
    ws, outside = places
    (ws / "sub" / "old.txt").write_text("old\n")
    changes = [
        Change(f"{ws}/a.txt", "a.txt", b"a\n", Original(None, None), None),
        Change(f"{ws}/sub/new.txt", "sub/new.txt", b"new\n", Original(None, None), None),
        Change(f"{ws}/sub/old.txt", "sub/old.txt", None, Original(b"old\n", 0o644), None),
    ]
    (ws / "sub").rename(ws / "stash")
    (ws / "sub").symlink_to(outside)
    (outside / "old.txt").write_text("victim\n")
    with DirHandles() as handles, pytest.raises(
        FileToolError, match=f"^apply_patch: cannot write sub/new.txt: {ws}/sub is a symbolic "
        "link; no file was changed$"
    ):
        commit(changes, handles, allow_all, threading.Event())
    assert sorted(os.listdir(outside)) == ["old.txt"]
    assert (outside / "old.txt").read_text() == "victim\n"
    assert sorted(os.listdir(ws)) == ["stash", "sub"]  # no a.txt, no temporary file


def test_missing_directories_are_made_only_where_allowed(places: tuple[Path, Path]) -> None:
    ws, _ = places

    def inside(path: str) -> None:
        if not path.startswith(f"{ws}/"):
            raise WriteNotAllowed(path, "outside")

    change = Change(f"{ws}/new/deep/f.txt", "new/deep/f.txt", b"f\n", Original(None, None), None)
    with DirHandles() as handles:
        commit([change], handles, inside, threading.Event())
    assert (ws / "new" / "deep" / "f.txt").read_text() == "f\n"
    refused = Change(f"{ws}-other/f.txt", "../ws-other/f.txt", b"f\n", Original(None, None), None)
    with DirHandles() as handles, pytest.raises(FileToolError, match="no file was changed"):
        commit([refused], handles, inside, threading.Event())
    assert not Path(f"{ws}-other").exists()
