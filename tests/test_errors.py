"""The error tree and the exact texts of DESIGN 3.1."""

from __future__ import annotations

import inspect

import pytest

import subsessions
from subsessions import errors
from subsessions.errors import (
    ChildCancelled,
    ChildFailed,
    ChildLimitReached,
    ChildNotFinished,
    ChildTimeout,
    DepthLimitReached,
    InvalidArguments,
    ProfileError,
    RolloutError,
    SubsessionError,
    UnknownSession,
    UnknownSessionType,
)

SID = "0190f1c2-3b4a-7d5e-8f60-718293a4b5c6"
ERROR_CLASSES = [
    obj
    for _, obj in inspect.getmembers(errors, inspect.isclass)
    if issubclass(obj, BaseException) and obj.__module__ == errors.__name__
]


def test_the_module_defines_the_documented_errors() -> None:
    names = {cls.__name__ for cls in ERROR_CLASSES}
    assert {
        "SubsessionError",
        "UnknownSession",
        "ChildNotFinished",
        "ChildTimeout",
        "ChildFailed",
        "ChildCancelled",
        "UnknownSessionType",
        "DepthLimitReached",
        "ChildLimitReached",
        "InvalidArguments",
        "ModelError",
        "ProfileError",
    } <= names


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_every_error_derives_from_the_base_and_is_exported(cls: type[Exception]) -> None:
    assert issubclass(cls, SubsessionError)
    assert getattr(subsessions, cls.__name__) is cls


@pytest.mark.parametrize(
    ("error", "text"),
    [
        (UnknownSession(SID), f"unknown session {SID}"),
        (ChildNotFinished(SID), f"session {SID} has not completed"),
        (ChildTimeout(SID, 250), f"session {SID} did not complete within 250ms"),
        (ChildFailed(SID, "boom: bad"), f"session {SID} failed: boom: bad"),
        (ChildCancelled(SID), f"session {SID} was cancelled"),
        (
            UnknownSessionType("nope", ("default", "tester")),
            "unknown session_type nope; expected one of: default, tester",
        ),
        (
            DepthLimitReached(2),
            "sub-session depth limit reached (max_depth=2); solve the task yourself",
        ),
        (
            ChildLimitReached(8),
            "sub-session limit reached (max_children=8); "
            "wait for or cancel a running session first",
        ),
        (
            InvalidArguments("wait_session", "missing required field timeout_ms"),
            "invalid arguments for wait_session: missing required field timeout_ms",
        ),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else "",
)
def test_design_texts_are_exact(error: SubsessionError, text: str) -> None:
    assert str(error) == text


def test_child_timeout_is_also_a_timeout_error() -> None:
    with pytest.raises(TimeoutError):
        raise ChildTimeout(SID, 10)


def test_errors_carry_their_fields() -> None:
    assert UnknownSession(SID).session_id == SID
    assert ChildNotFinished(SID).session_id == SID
    timeout = ChildTimeout(SID, 1500)
    assert (timeout.session_id, timeout.timeout_ms) == (SID, 1500)
    failed = ChildFailed(SID, "model exploded")
    assert (failed.session_id, failed.error) == (SID, "model exploded")
    assert ChildCancelled(SID).session_id == SID
    unknown_type = UnknownSessionType("x", ("a", "b"))
    assert (unknown_type.name, unknown_type.expected) == ("x", ("a", "b"))
    assert DepthLimitReached(3).max_depth == 3
    assert ChildLimitReached(4).max_children == 4
    invalid = InvalidArguments("cancel_session", "bad")
    assert (invalid.target, invalid.problem) == ("cancel_session", "bad")
    profile = ProfileError("/p/x.toml", "bad key")
    assert (profile.source, profile.problem) == ("/p/x.toml", "bad key")
    assert str(profile) == "/p/x.toml: bad key"
    rollout = RolloutError("/r.jsonl", "truncated")
    assert (rollout.path, str(rollout)) == ("/r.jsonl", "/r.jsonl: truncated")


def test_unknown_session_keeps_a_custom_message() -> None:
    error = UnknownSession("abc", "ambiguous id abc")
    assert (str(error), error.session_id) == ("ambiguous id abc", "abc")


def test_hostile_long_session_id_is_truncated_in_the_message() -> None:
    hostile = "x" * 100_000
    error = UnknownSession(hostile)
    assert str(error).startswith("unknown session xxx")
    assert len(str(error)) < 200
    assert error.session_id == hostile  # the field keeps the full value


def test_hostile_long_session_type_is_truncated_in_the_message() -> None:
    error = UnknownSessionType("y" * 100_000, ("default",))
    assert str(error).startswith("unknown session_type yyy")
    assert str(error).endswith("; expected one of: default")
    assert len(str(error)) < 200


def test_short_ids_are_not_truncated() -> None:
    assert str(UnknownSession("a" * 36)) == "unknown session " + "a" * 36
