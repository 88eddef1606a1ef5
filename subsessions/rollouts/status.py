"""A session's status, derived from its rollout alone.

Every task ends with exactly one terminal record, so the last task record
decides: `task_complete`, `error` and `turn_aborted` name how it ended. A task
with no terminal record is either still being run or its process died, and
only the writer's `pid` can tell them apart: the one in `session_meta`, or, for
a task that a later process resumed in the same file, one in the `turn_context`
that opened the task. Pids are reused, so the process must also have started
no later than the record that names it.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from subsessions.rollouts.values import parse_stamp

STATUSES = ("completed", "failed", "cancelled", "running", "interrupted", "idle")
# Tuples, not sets: a hand-made record's `type` may be a list, which a set cannot be asked about.
TERMINAL_EVENTS = ("task_complete", "turn_aborted", "error")
TASK_EVENTS = (*TERMINAL_EVENTS, "task_started")

# The meta timestamp has whole seconds (truncated) and so has the kernel's boot time:
# a process may appear to have started up to about two seconds after its session did.
_START_SLACK = 2.0


def status_of(last_task_event: dict[str, Any] | None, meta: dict[str, Any]) -> str:
    """The status given the session's last task event (None when it never ran a task).

    An open task's event may carry a `writer` claim (`pid`, `timestamp`) taken
    from its turn_context; otherwise the session_meta's is the one.
    """
    if last_task_event is None:
        return "idle"
    last_task_event = outcome(last_task_event)
    kind = last_task_event.get("type")
    if kind == "task_complete":
        return "completed"
    if kind == "error":
        return "failed"
    if kind == "turn_aborted":
        # "interrupted" is recorded when the task was torn down by something other than a cancel.
        return "interrupted" if last_task_event.get("reason") == "interrupted" else "cancelled"
    claim = last_task_event.get("writer")
    return "running" if writer_alive(claim if isinstance(claim, dict) else meta) else "interrupted"


def outcome(event: dict[str, Any]) -> dict[str, Any]:
    """A terminal event in its plain form: Codex's failed `task_complete` (with `error`) and
    `turn_aborted(budget_limited)` are failures; an abort with our `cancelled_by` (or ours
    before Codex's reasons, `cancelled`) is a cancel; Codex's own `interrupted` stays one."""
    kind = event.get("type")
    if kind == "task_complete" and event.get("error") is not None:
        return {**event, "type": "error"}
    if kind == "turn_aborted":
        reason = event.get("reason")
        if reason == "budget_limited":
            return {**event, "type": "error"}
        if event.get("cancelled_by") is not None or reason == "cancelled":
            return {**event, "reason": "cancelled"}
    return event


def writer_claim(turn_context: dict[str, Any]) -> dict[str, Any] | None:
    """The writer a `turn_context` record names (`pid` in its payload), if it names one."""
    pid = turn_context["payload"].get("pid")
    if type(pid) is not int:
        return None
    return {"pid": pid, "timestamp": turn_context.get("timestamp")}


def is_terminal(payload: dict[str, Any]) -> bool:
    return payload.get("type") in TERMINAL_EVENTS


def writer_alive(claim: dict[str, Any]) -> bool:
    """Whether the process a `pid` + `timestamp` names (a session_meta payload, or a claim
    from a turn_context) still runs, and is not a later process that got the same pid."""
    pid = claim.get("pid")
    if type(pid) is not int or pid <= 0:
        return False  # no pid recorded: nobody can be shown to be writing it
    started = process_start(pid)
    if started is None:
        return False
    session_start = parse_stamp(claim.get("timestamp"))
    if session_start is None or started == float("-inf"):
        return True  # nothing to compare with: existence is all we can check
    return started <= session_start + _START_SLACK


def process_start(pid: int) -> float | None:
    """When a live process started (epoch seconds); None if it is gone or a zombie.

    `-inf` where there is no /proc to ask: the process exists, its start is unknown.
    """
    if not _have_proc():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return float("-inf")
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may contain spaces or ')'.
    fields = raw[raw.rfind(b")") + 2 :].split()
    if len(fields) < 20 or fields[0] in (b"Z", b"X"):
        return None  # a zombie has stopped writing even if nobody has reaped it yet
    return _boot_time() + int(fields[19]) / _clock_ticks()  # field 22: start, in ticks


@functools.cache
def _have_proc() -> bool:
    return os.path.exists("/proc/self/stat")


@functools.cache
def _boot_time() -> float:
    with open("/proc/stat", "rb") as f:
        for line in f:
            if line.startswith(b"btime "):
                return float(line.split()[1])
    return 0.0


@functools.cache
def _clock_ticks() -> int:
    return os.sysconf("SC_CLK_TCK")
