"""`subsessions resume ID PROMPT` as a user runs it: a real process against a loopback server.

A session is first run with `subsessions run`, then continued with `subsessions resume`
(by a prefix of its id); the second model request must carry the first conversation,
the answer is printed, and the same rollout file grows. Mistakes are one stderr line.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from fake_openai import FakeOpenAI, Recorded, fake_openai, text
from openai_support import run

from subsessions.testing import plain_ending

__all__ = ["fake_openai"]  # the fixture, imported so that pytest finds it here


def model_args(home: Path, base_url: str) -> list[str]:
    return ["--home", str(home), "--base-url", base_url, "--wire-api", "chat", "--model", "m"]


def the_rollout(home: Path) -> Path:
    [path] = sorted(home.glob("sessions/*/*/*/rollout-*.jsonl"))
    return path


def records(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def conversation(request: Recorded) -> list[tuple[str, str]]:
    """The user and assistant turns the model was sent, as (role, text)."""
    found = []
    for message in request.body["messages"]:
        if message["role"] not in ("user", "assistant"):
            continue
        content = message["content"]
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content)
        found.append((message["role"], content))
    return found


def one_line(code: int, err: str) -> str:
    assert code == 1, err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
async def first_run(fake_openai: FakeOpenAI, tmp_path: Path) -> tuple[Path, str, bytes]:
    """A finished `subsessions run`: its home, its session id and its rollout's bytes."""
    home = tmp_path / "home"
    fake_openai.reply_with(text("It is 42."))
    code, out, err = await run("run", *model_args(home, fake_openai.base_url), "What is 6 * 7?",
                               cwd=tmp_path)
    assert code == 0, err
    assert out == "It is 42.\n"
    path = the_rollout(home)
    return home, records(path)[0]["payload"]["id"], path.read_bytes()


async def test_resume_by_prefix_continues_and_prints_the_answer(
    fake_openai: FakeOpenAI, tmp_path: Path, first_run: tuple[Path, str, bytes]
) -> None:
    home, session_id, before = first_run
    fake_openai.reply_with(text("Then 43."))

    code, out, err = await run(
        "resume", *model_args(home, fake_openai.base_url), session_id[:8], "And plus one?",
        cwd=tmp_path,
    )

    assert code == 0, err
    assert out == "Then 43.\n"
    assert "Traceback" not in err
    first, second = fake_openai.requests
    assert conversation(second) == [
        ("user", "What is 6 * 7?"), ("assistant", "It is 42."), ("user", "And plus one?"),
    ]
    assert conversation(first) == [("user", "What is 6 * 7?")]
    path = the_rollout(home)  # still exactly one file
    after = path.read_bytes()
    assert len(after) > len(before)
    assert after.startswith(before)
    every = records(path)
    assert [r["type"] for r in every].count("session_meta") == 1
    assert every[0]["payload"]["id"] == session_id
    assert plain_ending(every[-1]["payload"]) == {
        "type": "task_complete", "last_agent_message": "Then 43."}
    completes = [r for r in every if r["payload"].get("type") == "task_complete"]
    assert len(completes) == 2


async def test_resume_by_full_id_from_another_directory(
    fake_openai: FakeOpenAI, tmp_path: Path, first_run: tuple[Path, str, bytes]
) -> None:
    home, session_id, before = first_run
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    fake_openai.reply_with(text("Still 42."))

    code, out, err = await run(
        "resume", *model_args(home, fake_openai.base_url), session_id, "Sure?", cwd=elsewhere,
    )

    assert code == 0, err
    assert out == "Still 42.\n"
    assert the_rollout(home).read_bytes().startswith(before)


async def test_resume_says_on_stderr_which_lines_it_skipped(
    fake_openai: FakeOpenAI, tmp_path: Path, first_run: tuple[Path, str, bytes]
) -> None:
    home, session_id, _ = first_run
    path = the_rollout(home)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join([*lines[:2], b"garbage that is not json\n", *lines[2:]]))
    fake_openai.reply_with(text("Yes, 42."))

    code, out, err = await run(
        "resume", *model_args(home, fake_openai.base_url), session_id, "Really?", cwd=tmp_path,
    )

    assert code == 0, err
    assert out == "Yes, 42.\n"
    [line] = err.strip().splitlines()  # one line on stderr, though the run succeeded
    assert "skipped" in line
    assert re.search(r"\b3\b", line), line  # the line number of the junk
    assert conversation(fake_openai.requests[-1]) == [
        ("user", "What is 6 * 7?"), ("assistant", "It is 42."), ("user", "Really?"),
    ]


@pytest.mark.parametrize(
    ("target", "named"),
    [
        pytest.param("0190abcd-0000-7000-8000-000000000000", "unknown session", id="unknown"),
        pytest.param("0190abcd", "unknown session", id="unknown-prefix"),
        pytest.param("../x", "../x", id="dot-dot"),
        pytest.param("x" * 200, "not a session id", id="too-long"),
    ],
)
async def test_a_bad_id_exits_1_with_one_line_on_stderr(
    fake_openai: FakeOpenAI, tmp_path: Path, first_run: tuple[Path, str, bytes],
    target: str, named: str,
) -> None:
    home, _, before = first_run
    requests = len(fake_openai.requests)

    code, out, err = await run(
        "resume", *model_args(home, fake_openai.base_url), target, "next", cwd=tmp_path,
    )

    line = one_line(code, err)
    assert named in line
    assert out == ""
    assert len(fake_openai.requests) == requests  # no model call was made
    assert the_rollout(home).read_bytes() == before


async def test_resuming_a_file_that_is_not_a_rollout_names_it(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    notes = tmp_path / "notes.jsonl"
    notes.write_bytes(b'{"hello": "world"}\n')

    code, out, err = await run(
        "resume", *model_args(home, fake_openai.base_url), str(notes), "next", cwd=tmp_path,
    )

    line = one_line(code, err)
    assert str(notes) in line
    assert "not a subsessions rollout" in line
    assert out == ""
    assert fake_openai.requests == []
    assert notes.read_bytes() == b'{"hello": "world"}\n'
