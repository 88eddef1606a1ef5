"""Our readers take Codex 0.169's shapes (DESIGN 3.5: a failed `task_complete`, the abort
reasons, the sub-agent `source`) and ours before them alike (issue 14, the readers' step)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from subsessions.rollouts import list_rollouts, read_rollout

USAGE = {"input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens",
         "total_tokens"}


def records(path: str, kind: str) -> list[dict[str, Any]]:
    return [r["payload"] for r in read_rollout(path).records if r["type"] == kind]


def _line(kind: str, payload: dict[str, Any]) -> bytes:
    return orjson.dumps({"timestamp": "2026-11-01T10:00:00.000Z", "type": kind,
                         "payload": payload}) + b"\n"


@pytest.mark.parametrize(("ending", "status"), [
    ({"type": "turn_aborted", "reason": "cancelled"}, "cancelled"),  # ours before Codex's
    ({"type": "turn_aborted", "reason": "budget_limited"}, "failed"),
    ({"type": "turn_aborted", "reason": "interrupted"}, "interrupted"),  # Codex's own abort
    ({"type": "task_complete", "last_agent_message": None,
      "error": {"message": "x", "codex_error_info": "other"}}, "failed"),
    ({"type": "error", "message": "x"}, "failed"),  # ours before Codex's
])
def test_old_and_codex_shapes_are_read_alike(
    home: Path, ending: dict[str, Any], status: str
) -> None:
    folder = home / "sessions" / "2026" / "11" / "01"
    folder.mkdir(parents=True)
    parent, child = "01a20000-0000-7000-8000-000000000001", "01a20000-0000-7000-8000-000000000002"
    for sid, source in ((parent, "exec"), (child, {"subsession": {
            "parent_session_id": parent, "depth": 1, "session_type": "tester"}})):
        path = folder / f"rollout-2026-11-01T10-00-00-{sid}.jsonl"
        path.write_bytes(
            _line("session_meta", {"id": sid, "timestamp": "2026-11-01T10:00:00Z",
                                   "source": source, "instructions": "old field", "pid": 1})
            + _line("event_msg", {"type": "task_started"}) + _line("event_msg", ending))
    listed = {s.session_id: s for s in list_rollouts(home)}
    assert listed[child].parent_id == parent  # the old child shape still names its parent
    assert listed[child].status == status
    assert read_rollout(listed[child].path).status == status


def test_a_codex_shaped_child_names_its_parent(home: Path) -> None:
    folder = home / "sessions" / "2026" / "11" / "01"
    folder.mkdir(parents=True)
    parent, child = "01a20000-0000-7000-8000-000000000011", "01a20000-0000-7000-8000-000000000012"
    codex_source = {"subagent": {"thread_spawn": {
        "parent_thread_id": parent, "depth": 1, "agent_role": "tester", "agent_nickname": None,
        "agent_path": None}}}
    for sid, source in ((parent, "exec"), (child, codex_source)):
        path = folder / f"rollout-2026-11-01T10-00-00-{sid}.jsonl"
        path.write_bytes(
            _line("session_meta", {"id": sid, "timestamp": "2026-11-01T10:00:00Z",
                                   "source": source, "parent_thread_id": parent,
                                   "base_instructions": {"text": "be brief"}})
            + _line("event_msg", {"type": "task_started", "turn_id": "t1"})
            + _line("event_msg", {"type": "task_complete", "turn_id": "t1",
                                  "last_agent_message": "done"}))
    listed = {s.session_id: s for s in list_rollouts(home)}
    assert listed[child].parent_id == parent
    assert listed[child].source_kind == "subsession"
    assert listed[child].status == "completed"


def test_rollouts_the_real_codex_wrote_are_listed_and_nested(home: Path) -> None:
    """Five files Codex 0.169 itself wrote (`codex exec` against a loopback model): a
    completed and resumed one, a parent and the sub-agent it spawned, a failed one, one
    interrupted by Ctrl-C. Their extra line types and fields are skipped, not fatal."""
    folder = home / "sessions" / "2026" / "11" / "23"
    folder.mkdir(parents=True)
    for fixture in (Path(__file__).parent / "fixtures" / "codex").glob("*.jsonl"):
        (folder / fixture.name).write_bytes(fixture.read_bytes())
    listed = {s.session_id[:13]: s for s in list_rollouts(home)}
    assert {k: (s.status, s.source_kind) for k, s in listed.items()} == {
        "01a20749-47dd": ("interrupted", "exec"),
        "01a20749-129b": ("failed", "exec"),
        "01a20748-f091": ("interrupted", "subsession"),
        "01a20748-f00a": ("completed", "exec"),
        "01a20748-ef20": ("completed", "exec"),
    }
    assert listed["01a20748-f091"].parent_id == listed["01a20748-f00a"].session_id
    assert listed["01a20748-f00a"].tokens == 259
    for summary in listed.values():
        assert read_rollout(summary.path).status == summary.status
