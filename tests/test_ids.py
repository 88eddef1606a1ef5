"""Session ids: uuid7, time ordered, validated against hostile input."""

from __future__ import annotations

import os
import time
import uuid
import warnings

import pytest

from subsessions.ids import MAX_ID_LENGTH, id_problem, is_session_id, new_session_id


def test_new_session_id_is_a_canonical_uuid7() -> None:
    sid = new_session_id()
    parsed = uuid.UUID(sid)
    assert parsed.version == 7
    assert parsed.variant == uuid.RFC_4122
    assert str(parsed) == sid
    assert is_session_id(sid)


def test_uuid7_timestamp_is_now() -> None:
    before = time.time_ns() // 1_000_000
    sid = new_session_id()
    after = time.time_ns() // 1_000_000
    assert before <= uuid.UUID(sid).int >> 80 <= after


def test_a_burst_of_ids_keeps_the_clocks_timestamp() -> None:
    """Thousands of ids in a few milliseconds (a fan-out, each task's turn id) sort in order
    and still carry the time they were made, not one pushed a millisecond ahead per id."""
    before = time.time_ns() // 1_000_000
    ids = [new_session_id() for _ in range(20_000)]
    after = time.time_ns() // 1_000_000
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert before <= uuid.UUID(ids[-1]).int >> 80 <= after + 5  # 4,096 a millisecond at most


def test_ids_sort_in_creation_order() -> None:
    ids = [new_session_id() for _ in range(5000)]
    assert len(set(ids)) == len(ids)
    assert sorted(ids) == ids


def test_is_session_id_accepts_canonical_lowercase_only() -> None:
    sid = new_session_id()
    assert is_session_id(sid)
    assert is_session_id(str(uuid.uuid4()))
    for bad in (
        sid.upper(),
        sid.replace("-", ""),
        "{" + sid + "}",
        "urn:uuid:" + sid,
        sid + "\n",
        " " + sid,
        sid[:-1],
        sid[:-1] + "g",
        "",
        "not-a-uuid",
    ):
        assert not is_session_id(bad), bad


@pytest.mark.parametrize(
    "hostile",
    [
        "../x",
        "..",
        "a/b",
        "/etc/passwd",
        "a\\b",
        "..\\x",
        "a\x00b",
        "a\nb",
        "a\rb",
        "a\tb",
        "\x1b[31m",
        "x" * (MAX_ID_LENGTH + 1),
    ],
)
def test_id_problem_flags_hostile_ids(hostile: str) -> None:
    problem = id_problem(hostile)
    assert isinstance(problem, str)
    assert problem
    assert "\n" not in problem


def test_id_problem_names_the_reason() -> None:
    assert "path" in (id_problem("../x") or "")
    assert str(MAX_ID_LENGTH) in (id_problem("x" * 10_000) or "")


@pytest.mark.parametrize(
    "ordinary",
    ["abc", "not-a-uuid", "child-1", "a.b", "0190f1c2", "x" * MAX_ID_LENGTH, "ünïcödé"],
)
def test_id_problem_accepts_ordinary_strings(ordinary: str) -> None:
    assert id_problem(ordinary) is None


def test_id_problem_accepts_real_ids() -> None:
    assert id_problem(new_session_id()) is None


def test_a_forked_process_never_makes_its_parents_next_id() -> None:
    """Batch and Ray workers fork: a child that kept the parent's pooled random bits would
    make the same id as its parent within the same millisecond."""
    new_session_id()  # the pool is filled: the next 511 ids' random bits are known here
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork in a threaded process
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the forked child
        os.write(write, new_session_id().encode())
        os._exit(0)
    os.close(write)
    theirs = os.read(read, 64).decode()
    os.close(read)
    assert os.waitpid(pid, 0)[1] == 0
    ours = new_session_id()
    assert is_session_id(theirs)
    assert theirs[19:] != ours[19:]  # the random bits (variant and 62 bits) differ
