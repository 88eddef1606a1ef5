"""One session's row, folded from its rollout's lines as they are appended.

The follower hands each file's new bytes here once, in order, so nothing is read
twice: a line updates counters (model calls, tokens, tool calls), the last task
event (which decides the status, as `rollouts.status` does) and the last message.
A file that is not a rollout (empty, no `session_meta` first line) and lines that
do not parse are kept as a note on the row, never an exception. A file read only in
part (the live view reads a few MB of one file a poll) is `loading` until the follower
has caught up with its size: what its first part says (a task started, a line cut
where the read stopped) is not yet what the file says.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from attrs import define, field

from subsessions.rollouts.status import TASK_EVENTS, outcome, status_of, writer_claim
from subsessions.rollouts.summary import NOT_OURS, as_record, parent_of, source_kind_of
from subsessions.rollouts.values import optional_stamp, optional_text, parse_stamp, parts_text

DAMAGED = "damaged"  # the status word of a file that is not a rollout at all
LOADING = "loading"  # the status word of a file read only in part so far
EMPTY = "empty file"
LONGEST = 64 << 20  # a line longer than this is not a rollout's (instructions run to a few MB)
# Response items that are a tool call, ours and Codex's own kinds.
TOOL_CALLS = ("function_call", "custom_tool_call", "local_shell_call", "web_search_call")

Alive = Callable[[dict[str, Any]], bool]  # is the writer a claim names still running?


@define
class SessionStats:
    """What one rollout says so far; `feed` it the file's bytes in order."""

    key: str  # the id in the file name
    path: str
    offset: int = 0  # bytes of whole lines consumed
    torn: bytes = b""  # a partial last line, waiting for its newline
    size: int = 0  # the file's size at the follower's last look
    inode: int = 0
    version: int = 0  # bumped whenever anything a row shows may have changed
    session_id: str | None = None  # None until the session_meta line is read
    parent_id: str | None = None
    profile: str | None = None
    model: str | None = None
    source_kind: str = "unknown"
    started: float | None = None  # epoch seconds of the session_meta
    last_stamp: float | None = None  # of the last record
    creator: dict[str, Any] = field(factory=dict)  # pid and timestamp from session_meta
    problem: str | None = None  # why the file is not a rollout
    bad_lines: int = 0
    turns: int = 0  # model calls (token_count records)
    input_tokens: int = 0
    output_tokens: int = 0
    tool_calls: int = 0
    last_message: str = ""
    task_event: dict[str, Any] | None = None  # the last task event, with the writer's claim
    _claim: dict[str, Any] | None = None  # the writer named by the last turn_context

    @property
    def has_meta(self) -> bool:
        return self.session_id is not None

    @property
    def loading(self) -> bool:
        """Whether bytes the file had at the last look are still to be read."""
        return self.problem is None and self.offset + len(self.torn) < self.size

    def feed(self, data: bytes) -> None:
        """Fold appended bytes; a trailing partial line waits for the rest."""
        if not data:
            return
        self.version += 1
        if self.problem is not None:  # not a rollout: skipped, never held in memory
            self.offset += len(data)
            return
        lines = (self.torn + data).split(b"\n")
        self.torn = lines.pop()
        for line in lines:
            self.offset += len(line) + 1
            if self.problem is None and line.strip():
                self._line(line)
        if len(self.torn) > LONGEST:
            self.problem = f"a line longer than {LONGEST >> 20} MB"
            self.offset += len(self.torn)
            self.torn = b""

    def _line(self, line: bytes) -> None:
        record = as_record(line)
        if self.session_id is None:
            if record is None or record["type"] != "session_meta" or not isinstance(
                record["payload"].get("id"), str
            ):
                self.problem = NOT_OURS
                return
            self._meta(record)
            return
        if record is None:
            self.bad_lines += _unreadable(line)
            return
        stamp = parse_stamp(record.get("timestamp"))
        if stamp is not None:
            self.last_stamp = stamp
        payload: dict[str, Any] = record["payload"]
        kind = payload.get("type")
        if record["type"] == "turn_context":
            self._claim = writer_claim(record)
            self.model = optional_text(payload.get("model")) or self.model
        elif record["type"] == "response_item":
            self._item(payload, kind)
        elif record["type"] == "event_msg":
            self._event(payload, kind)

    def _meta(self, record: dict[str, Any]) -> None:
        meta: dict[str, Any] = record["payload"]
        self.session_id = meta["id"]
        self.parent_id = parent_of(meta) or optional_text(meta.get("parent_thread_id"))
        self.source_kind = source_kind_of(meta)
        source = meta.get("source")
        spawn = source.get("subagent") if isinstance(source, dict) else None
        spawn = spawn.get("thread_spawn") if isinstance(spawn, dict) else None
        if not isinstance(spawn, dict):
            spawn = {}
        # Ours name the profile; Codex's children carry a role or a nickname.
        self.profile = (optional_text(meta.get("session_type"))
                        or optional_text(spawn.get("agent_role"))
                        or optional_text(meta.get("agent_nickname")))
        self.model = optional_text(meta.get("model"))
        stamp = optional_stamp(meta.get("timestamp")) or optional_stamp(record.get("timestamp"))
        self.creator = {"pid": meta.get("pid"), "timestamp": stamp}
        self.started = parse_stamp(stamp)
        self.last_stamp = parse_stamp(record.get("timestamp")) or self.started

    def _item(self, payload: dict[str, Any], kind: object) -> None:
        if kind in TOOL_CALLS:
            self.tool_calls += 1
        elif kind == "message":
            role = payload.get("role")
            said = parts_text(payload.get("content")).strip()
            # Codex injects context as user messages in angle brackets: not what was asked.
            if role == "assistant" or (role == "user" and said and not said.startswith("<")):
                self.last_message = said

    def _event(self, payload: dict[str, Any], kind: object) -> None:
        if kind == "token_count":
            info = payload.get("info")
            total = info.get("total_token_usage") if isinstance(info, dict) else None
            if isinstance(total, dict):
                self.turns += 1
                self.input_tokens = _count(total.get("input_tokens"), self.input_tokens)
                self.output_tokens = _count(total.get("output_tokens"), self.output_tokens)
        elif kind in TASK_EVENTS:
            kept = ("type", "reason", "error", "cancelled_by")
            event: dict[str, Any] = {k: payload[k] for k in kept if k in payload}
            if kind == "task_started" and self._claim is not None:
                event["writer"] = self._claim
            self.task_event = outcome(event)
            if self.task_event.get("type") == "error":
                error = payload.get("error")
                said = error.get("message") if isinstance(error, dict) else payload.get("message")
                self.last_message = f"error: {optional_text(said) or kind}"

    def status(self, alive: Alive) -> str:
        """The status word, as `rollouts.status` derives it; `alive` answers (and may cache)
        whether an open task's writer still runs."""
        if self.loading:
            return LOADING
        if self.problem is not None or self.session_id is None:
            return DAMAGED
        event = self.task_event
        if event is not None and event.get("type") == "task_started":
            claim = event.get("writer")
            return "running" if alive(claim if isinstance(claim, dict) else self.creator) \
                else "interrupted"
        return status_of(event, self.creator)

    def note(self, running: bool) -> str | None:
        """What is wrong with the file, if anything: shown marked on its row."""
        if self.problem is not None:
            return self.problem
        if self.loading:
            return None  # its last line is cut where the read stopped, not in the file
        if self.session_id is None:
            return "no whole first line" if self.torn else EMPTY
        notes = []
        if self.bad_lines:
            notes.append(f"{self.bad_lines} unreadable line{'s' if self.bad_lines > 1 else ''}")
        if self.torn and not running:
            notes.append("torn last line")
        return ", ".join(notes) or None


def _unreadable(line: bytes) -> int:
    """1 for a line that is not a JSON object; 0 for a record of a type this reader does not
    know (Codex writes more kinds than it documents), which is skipped as other readers do."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return 1
    return 0 if isinstance(record, dict) and isinstance(record.get("type"), str) else 1


def _count(value: object, before: int) -> int:
    return value if type(value) is int and value >= 0 else before
