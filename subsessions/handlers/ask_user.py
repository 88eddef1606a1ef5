"""`ask_user`: a question for the person behind the top-level session's host.

Offered only when the host registered a `user_input_handler`; a child's question goes to
the root's handler, so children never wait on a prompt of their own.
"""

from __future__ import annotations

from typing import Any

from subsessions.config import ASK_USER as NAME

__all__ = ["NAME", "SPEC"]

SPEC: dict[str, Any] = {
    "type": "function",
    "name": NAME,
    "description": "Ask the user a question and wait for the answer. Use sparingly.",
    "parameters": {
        "type": "object",
        "properties": {
            "question": {"type": "string", "minLength": 1},
            "choices": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["question"],
        "additionalProperties": False,
    },
}
