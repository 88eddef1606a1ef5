"""Built-in tools for real work: `shell`, `apply_patch`, `read_file`, `list_dir`.

    tools = builtin_tools(ToolContext(cwd=workspace, sandbox="workspace-write"))
    child_tools = builtin_tools(context.for_child())   # approvals forced to "never"

Each is a `subsessions.config.Tool` whose async handler returns text for the model and
raises (a `ToolError`, or `InvalidArguments` for malformed arguments) to fail the call.
`shell` runs under bubblewrap unless the sandbox is `danger-full-access` (`sandbox.py`);
the file tools check every resolved write path against the same policy.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from functools import partial
from typing import Any

from subsessions.config import BUILTIN_TOOL_NAMES, Tool
from subsessions.tools import apply_patch, files, shell
from subsessions.tools.context import (
    APPROVAL_POLICIES,
    NO_APPROVAL,
    SANDBOX_MODES,
    AskPermission,
    ToolContext,
)
from subsessions.tools.errors import (
    ApprovalDenied,
    CommandNotFound,
    EscalationNotAllowed,
    FileToolError,
    PatchConflict,
    PatchSyntaxError,
    SandboxUnavailable,
    ToolError,
    WriteNotAllowed,
)

__all__ = [
    "APPROVAL_POLICIES",
    "BUILTIN_TOOL_NAMES",
    "NO_APPROVAL",
    "SANDBOX_MODES",
    "ApprovalDenied",
    "AskPermission",
    "CommandNotFound",
    "EscalationNotAllowed",
    "FileToolError",
    "PatchConflict",
    "PatchSyntaxError",
    "SandboxUnavailable",
    "ToolContext",
    "ToolError",
    "WriteNotAllowed",
    "builtin_tools",
]

Handler = Callable[[ToolContext, dict[str, Any], Any], Awaitable[str]]


def _handler(function: Handler, context: ToolContext) -> Callable[..., Awaitable[str]]:
    return partial(function, context)


def _make(name: str, context: ToolContext) -> Tool:
    if name == "shell":
        return Tool(
            "shell", shell.description(context), shell.parameters(context),
            _handler(shell.run_shell, context),
        )
    if name == "apply_patch":
        return Tool(
            "apply_patch", apply_patch.FORMAT, apply_patch.PARAMETERS,
            _handler(apply_patch.run_apply_patch, context),
        )
    if name == "read_file":
        return Tool(
            "read_file",
            "Read a text file with line numbers (1-based), up to 2000 lines from `offset`; "
            "long lines are cut.",
            files.READ_FILE_PARAMETERS,
            _handler(files.run_read_file, context),
        )
    return Tool(
        "list_dir",
        "List a directory's entries (directories end in '/', files show their size in "
        "bytes, symlinks their target), descending `depth` levels.",
        files.LIST_DIR_PARAMETERS,
        _handler(files.run_list_dir, context),
    )


def builtin_tools(context: ToolContext, names: Iterable[str] | None = None) -> tuple[Tool, ...]:
    """The built-in tools bound to `context`, in `BUILTIN_TOOL_NAMES` order (or `names`')."""
    wanted = BUILTIN_TOOL_NAMES if names is None else tuple(dict.fromkeys(names))
    unknown = [name for name in wanted if name not in BUILTIN_TOOL_NAMES]
    if unknown:
        raise ValueError(
            f"unknown built-in tool {unknown[0]!r}; expected one of: "
            f"{', '.join(BUILTIN_TOOL_NAMES)}"
        )
    return tuple(_make(name, context) for name in wanted)
