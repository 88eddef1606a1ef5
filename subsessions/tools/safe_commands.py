"""Commands known to only read (Codex's `is_known_safe_command`, conservatively).

Used by the `untrusted` approval policy: these run (still inside the sandbox) without
asking. `bash -lc "..."` (or `sh -c`, `zsh -lc`) counts when its script is only plain
words joined by `&&`, `||`, `;` or `|` and every part is safe: no redirection, no
substitution, no variables, no subshells.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

_ALWAYS = frozenset({
    "cat", "cd", "echo", "false", "grep", "head", "ls", "nl", "pwd", "tail", "true", "wc",
    "which", "basename", "dirname", "stat", "du", "df", "whoami", "uname", "env", "printenv",
    "realpath", "readlink", "cut", "tr", "diff", "cmp", "md5sum", "sha256sum",
})
_FIND_UNSAFE = frozenset({
    "-exec", "-execdir", "-ok", "-okdir", "-delete", "-fls", "-fprint", "-fprint0", "-fprintf",
})
_RG_UNSAFE = ("--pre", "--hostname-bin", "--search-zip", "-z")
_GIT_READ = frozenset({"status", "diff", "log", "show"})
_GIT_BRANCH_LISTING = frozenset({"-a", "--all", "-l", "--list", "-v", "-vv", "--show-current",
                                 "-r", "--remotes"})
_SHELLS = frozenset({"bash", "sh", "zsh", "dash"})
_OPERATORS = frozenset({"&&", "||", ";", "|"})
_SED_PRINT = re.compile(r"^\d+(,\d+)?p$")
_PLAIN_WORD = re.compile(r"^[^$`\\<>(){}&|;!*?\[\]~\n]*$")  # nothing a shell would expand


def is_known_safe(command: Sequence[str]) -> bool:
    if not command:
        return False
    script = _shell_script(command)
    if script is not None:
        return _safe_script(script)
    return _safe_words(list(command))


def _shell_script(command: Sequence[str]) -> str | None:
    if len(command) == 3 and command[0].rsplit("/", 1)[-1] in _SHELLS and command[1] in (
        "-c", "-lc"
    ):
        return command[2]
    return None


def _safe_words(words: list[str]) -> bool:
    program = words[0]
    if program.startswith(("/usr/bin/", "/bin/")):
        program = program.rsplit("/", 1)[-1]
    args = words[1:]
    if program in _ALWAYS:
        return program != "env" or not args  # `env X=1 cmd` runs cmd
    if program == "find":
        return not any(arg in _FIND_UNSAFE for arg in args)
    if program == "rg":
        return not any(arg.startswith(_RG_UNSAFE) for arg in args)
    if program == "git":
        if not args:
            return False
        sub, rest = args[0], args[1:]
        if sub in _GIT_READ:
            return not any(a.startswith(("--output", "--ext-diff", "-c")) for a in rest)
        if sub == "branch":
            return all(a in _GIT_BRANCH_LISTING for a in rest)
        return False
    if program == "sed":
        return len(args) == 3 and args[0] == "-n" and bool(_SED_PRINT.match(args[1]))
    return False


def _safe_script(script: str) -> bool:
    if "\n" in script or "\r" in script:  # a newline separates commands, as `;` does
        return False
    try:
        lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = ""  # `a#b` is one word to bash; never drop what bash would run
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes
        return False
    if not tokens:
        return False
    parts: list[list[str]] = [[]]
    for token in tokens:
        if token in _OPERATORS:
            parts.append([])
        elif not _PLAIN_WORD.match(token):
            return False
        else:
            parts[-1].append(token)
    return all(part and _safe_words(part) for part in parts)
