"""Errors of the built-in tools; each message is written for the model that called the tool.

    ToolError
    ├── SandboxUnavailable     bwrap missing or failing: the command was refused, not run bare
    ├── WriteNotAllowed        a write outside the sandbox's writable roots
    ├── ApprovalDenied         the approval policy asked and the answer was not `approved`
    ├── EscalationNotAllowed   with_escalated_permissions under approval `never`
    ├── CommandNotFound        the program is not on PATH / not executable
    ├── PatchSyntaxError       a malformed apply_patch text (line number and what was expected)
    ├── PatchConflict          a hunk that does not match the file (file and hunk named)
    └── FileToolError          read_file / list_dir / apply_patch: missing, binary, directory...

Malformed arguments raise the engine's `InvalidArguments` ("invalid arguments for {tool}:
...") like every other tool.
"""

from __future__ import annotations

from subsessions.errors import SubsessionError


class ToolError(SubsessionError):
    """Base of the errors the built-in tools raise on purpose."""


class SandboxUnavailable(ToolError):
    """bubblewrap is missing or cannot start: the command was refused, never run bare.

    Message: `sandbox unavailable: {reason}; the command was refused rather than run
    outside the sandbox`.
    """
    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(
            f"sandbox unavailable: {reason}; the command was refused rather than run "
            "outside the sandbox"
        )


class WriteNotAllowed(ToolError):
    """A write outside the sandbox's writable roots, or into the engine's home.

    Message: `writing {path} is not allowed: {why}`.
    """
    def __init__(self, path: str, why: str, message: str | None = None) -> None:
        self.path = path
        self.why = why
        super().__init__(message or f"writing {path} is not allowed: {why}")


class ApprovalDenied(ToolError):
    """The approval policy asked, and the answer was not `approved`.

    Message: `{what} was not approved ({kind}); nothing was run or changed`.
    """
    def __init__(self, what: str, kind: str) -> None:
        self.what = what
        self.kind = kind
        super().__init__(f"{what} was not approved ({kind}); nothing was run or changed")


class EscalationNotAllowed(ToolError):
    """A command asked to leave the sandbox (`with_escalated_permissions`) where the
    approval policy cannot grant it; the command was not run."""
    def __init__(self, approval: str, sandbox: str) -> None:
        self.approval = approval
        self.sandbox = sandbox
        super().__init__(
            f"with_escalated_permissions is not allowed under the approval policy {approval!r}; "
            f"the command was not run. Work within the {sandbox} sandbox, without "
            "with_escalated_permissions"
        )


class CommandNotFound(ToolError):
    """The program is not on PATH, or not executable.

    Message: `command not found: {program!r} ({why})`.
    """
    def __init__(self, program: str, why: str) -> None:
        self.program = program
        self.why = why
        super().__init__(f"command not found: {program!r} ({why})")


class PatchSyntaxError(ToolError):
    """A malformed `apply_patch` text; nothing was changed.

    Message: `invalid patch, line {line}: {problem}`.
    """
    def __init__(self, line: int, problem: str) -> None:
        self.line = line
        self.problem = problem
        super().__init__(f"invalid patch, line {line}: {problem}")


class PatchConflict(ToolError):
    """A hunk does not match its file; no file was changed (all hunks or none).

    Message: `apply_patch failed, no file was changed: {path}: {problem}`.
    """
    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"apply_patch failed, no file was changed: {path}: {problem}")


class FileToolError(ToolError):
    """A path that cannot be read, listed or written for a reason the message gives."""
