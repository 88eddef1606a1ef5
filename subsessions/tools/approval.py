"""Approval policies (Codex's meanings) for `shell` and `apply_patch`.

shell, by policy (`escalate` = the model set `with_escalated_permissions`):

  never       run in the sandbox; an escalation request is refused without asking
  on-request  run in the sandbox; an escalation request asks, approved = run unsandboxed
  untrusted   a known safe read-only command runs in the sandbox; any other command asks
              (approved = runs in the sandbox), an escalation request asks (approved = runs
              unsandboxed)

Under `danger-full-access` there is no sandbox to leave, so `escalate` changes nothing;
`untrusted` still asks before commands that are not known to be safe.

apply_patch: writes inside the writable roots go ahead; under `never` others are refused,
under `on-request` they are asked for; `untrusted` asks for every patch.

Asking calls `ToolContext.ask_permission(request)`, which returns a permission result
kind (`approved`, or a `denied-...` kind). Without it, or when it fails, the answer is
`denied-no-approval-rule-and-could-not-request-from-user`.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

from subsessions.tools.context import NO_APPROVAL, ToolContext, permission_kind
from subsessions.tools.errors import ApprovalDenied, EscalationNotAllowed, WriteNotAllowed
from subsessions.tools.safe_commands import is_known_safe

log = logging.getLogger(__name__)


async def ask(context: ToolContext, request: dict[str, Any]) -> str:
    """The permission result kind for `request`; never raises for a handler's failure."""
    if context.ask_permission is None:
        return NO_APPROVAL
    try:
        answer: Any = context.ask_permission(request)
        if inspect.isawaitable(answer):  # a plain function is accepted too
            answer = await answer
    except Exception:
        log.exception("ask_permission failed; treated as denied")
        return NO_APPROVAL
    return permission_kind(answer)


async def approve_shell(
    context: ToolContext,
    command: list[str],
    workdir: str,
    *,
    escalate: bool,
    justification: str | None,
    call_id: str | None,
) -> bool:
    """Whether to run sandboxed (True) or not (False); raises when the command may not run."""
    sandboxed = context.sandbox != "danger-full-access"
    if escalate and sandboxed and context.approval == "never":
        raise EscalationNotAllowed(context.approval, context.sandbox)
    if escalate and sandboxed:
        reason = "escalation"
    elif context.approval == "untrusted" and not is_known_safe(command):
        reason = "untrusted"
    else:
        return sandboxed
    runs_in = context.sandbox if sandboxed and reason != "escalation" else "none"
    request = {
        "kind": "shell",
        "command": list(command),
        "workdir": workdir,
        "justification": justification,
        "reason": reason,
        "sandbox": runs_in,
        "tool_call_id": call_id,
    }
    kind = await ask(context, request)
    if kind != "approved":
        where = "outside the sandbox" if runs_in == "none" else f"in the {runs_in} sandbox"
        raise ApprovalDenied(f"running {command!r} {where}", kind)
    return runs_in != "none"


async def approve_patch(
    context: ToolContext,
    patch: str,
    paths: list[str],
    problems: list[str],
    call_id: str | None,
) -> None:
    """Raise unless the patch may be applied; `problems` are the sandbox's objections."""
    if context.approval == "untrusted":
        reason = "untrusted"
    elif not problems:
        return
    elif context.approval == "never":
        why = "; ".join(problems)
        raise WriteNotAllowed(", ".join(paths), why, f"apply_patch refused, no file was changed: "
                              f"{why} (approval policy never)")
    else:
        reason = "outside-sandbox"
    request = {
        "kind": "write",
        "paths": paths,
        "patch": patch,
        "reason": reason,
        "sandbox_problems": problems,
        "tool_call_id": call_id,
    }
    kind = await ask(context, request)
    if kind != "approved":
        raise ApprovalDenied(f"applying the patch to {', '.join(paths)}", kind)
