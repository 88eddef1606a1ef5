"""The base instructions of a top-level session that `run`, `mcp` and `serve` start.

Codex sends every session its base instructions; without them a model is handed the
sub-session tools with no word of what they are for, and answers before its children
are done. Children never get this text: they keep their profile's instructions.
"""

from __future__ import annotations

from attrs import evolve

from subsessions.config import SessionConfig

BASE_INSTRUCTIONS = """\
You are the top-level session of subsessions. You can delegate work to sub-sessions: \
child conversations that run in the background, each started from a profile \
(session_type) and your prompt alone; they never see this conversation, so give each \
one a complete, self-contained task.

Tools:
- create_session(session_type, prompt, budget) starts a child and returns its session_id \
at once.
- wait_session(session_id, timeout_ms) waits for a child and returns its last message; \
wait_sessions waits for several (mode any or all).
- list_sessions shows your children, their status and usage; cancel_session stops one; \
send_message tells a running child something more.

Do small tasks yourself. When you delegate, wait for every child whose result you need \
before you give your final answer, and base that answer on their results."""


def with_base_instructions(config: SessionConfig) -> SessionConfig:
    """`config` with the base text when the user gave no instructions of their own and the
    session is offered the sub-session tools (`max_depth` above 0)."""
    if config.instructions is not None or config.max_depth == 0:
        return config
    return evolve(config, instructions=BASE_INSTRUCTIONS)
