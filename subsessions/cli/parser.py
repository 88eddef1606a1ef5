"""The `subsessions` command line's parser: the options the commands share, `run`, `resume`,
`mcp` and `profiles` here, the other commands' arguments in `commands`. No engine is
imported to build it, so `subsessions mcp` answers its client fast."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NoReturn

from subsessions._version import __version__
from subsessions.cli.commands import (
    add_a2a_command,
    add_batch_command,
    add_rollout_commands,
    add_serve_command,
    add_watch_command,
    idle_timeout_option,
)
from subsessions.engine.control import CONTROL_HELP


class Parser(argparse.ArgumentParser):
    """A usage mistake is one line on stderr, not argparse's usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    home_help = "state directory (default: $SUBSESSIONS_HOME, else ~/.subsessions)"
    common = Parser(add_help=False)
    # SUPPRESS: a --home given before the command is not overwritten by the command's default
    common.add_argument("--home", type=Path, default=argparse.SUPPRESS, help=home_help)
    model_options = Parser(add_help=False)
    model_options.add_argument("--model", help="model id (config: model)")
    model_options.add_argument(
        "--model-provider", metavar="NAME",
        help="a provider of config.toml's [model_providers] or a built-in: openai, anthropic, "
        "ollama, vllm, llamacpp, or echo (offline: answers every task with its prompt) "
        "(config: model_provider)")
    model_options.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. "
                               "http://127.0.0.1:11434/v1")
    model_options.add_argument("--wire-api", choices=("responses", "chat", "anthropic"),
                               help="Responses API, Chat Completions or Anthropic's Messages")
    model_options.add_argument("--api-key-env", metavar="NAME",
                               help="variable holding the API key (default OPENAI_API_KEY; "
                               "not needed for a loopback URL)")
    model_options.add_argument("--max-depth", type=int, help="how deep sub-sessions may nest")
    model_options.add_argument("--max-children", type=int,
                               help="sub-sessions running at once in the tree")
    model_options.add_argument("--ray", metavar="ADDRESS",
                               help="run sub-sessions on a Ray cluster: 'local', 'auto' or "
                               "ray://HOST:PORT (needs the [ray] extra; config: [ray])")
    work_options = Parser(add_help=False)
    work_options.add_argument(
        "--sandbox", choices=("read-only", "workspace-write", "danger-full-access"),
        default="workspace-write",
        help="what shell commands may touch (default workspace-write: the current directory)",
    )
    work_options.add_argument(
        "--approval", choices=("untrusted", "on-request", "never"), default="never",
        help="when to ask before running a command (default never; sub-sessions never ask)",
    )
    work_options.add_argument("--network", action="store_true",
                              help="allow network access under workspace-write")
    work_options.add_argument("--instructions", metavar="TEXT",
                              help="the session's own instructions, instead of the base text "
                              "on the sub-session tools (resume: instead of the stored ones)")
    parser = Parser(
        prog="subsessions",
        description="Spawn, drive, wait for, cancel and inspect LLM sub-sessions.",
    )
    parser.add_argument("--home", type=Path, default=None, help=home_help)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser(
        "demo", parents=[common],
        help="offline demo: a scripted parent fans out, waits, cancels, prints the tree",
        description="Runs the main job offline on a scripted model, in a temporary home "
        "unless --home is given.",
    )
    run = commands.add_parser(
        "run", parents=[common, model_options, work_options],
        help="run a session with the sub-session tools on the configured model",
        description="Runs PROMPT to completion on the configured model; prints the final "
        "message. Ctrl-C cancels the session and every sub-session (exit 130).",
    )
    run.add_argument("prompt")
    run.add_argument("--profile", help="run this profile top-level (its persona and memory too)")
    run.add_argument("--control", action="store_true", help=CONTROL_HELP)

    resume = commands.add_parser(
        "resume", parents=[common, model_options, work_options],
        help="continue a session from its rollout with a new prompt",
        description="Rebuilds the session's history from its rollout (an id, a unique prefix "
        "or a path), appends to the same file, and runs PROMPT; prints the final message.",
    )
    resume.add_argument("id")
    resume.add_argument("prompt")
    resume.add_argument("--control", action="store_true", help=CONTROL_HELP)

    _add_mcp_command(commands, common, model_options)
    add_serve_command(commands, [common, model_options])
    add_a2a_command(commands, [common, model_options])
    add_batch_command(commands, [common, model_options, work_options])

    profiles = commands.add_parser(
        "profiles", help="the loaded profiles",
        description="The profiles a session here would see and the file each comes from: "
        "built-ins, $SUBSESSIONS_HOME/profiles/*.toml, ~/.codex/agents/*.toml, "
        "~/.claude/agents/*.md, then the project's .subsessions/profiles/*.toml, "
        ".subsessions/agents/NAME/, .codex/agents/*.toml, .claude/agents/*.md and "
        ".github/agents/*.agent.md (later wins by name; [profiles] sources in config.toml "
        "narrows it). A peer's file that does not parse is skipped with one warning.")
    profile_commands = profiles.add_subparsers(dest="action", required=True, metavar="ACTION")
    profile_commands.add_parser("list", parents=[common], help="names, sources, descriptions")
    show_profile = profile_commands.add_parser("show", parents=[common], help="one profile")
    show_profile.add_argument("name")

    trees = commands.add_parser(
        "worktrees", help="the git worktrees worktree children left",
        description="Worktree children (isolation = \"worktree\") work in git worktrees "
        "under $SUBSESSIONS_HOME/worktrees, on branches subsessions/ID. An unchanged one is "
        "removed when its child ends; one with changes or commits, or whose child was "
        "cancelled, stays for inspection until `clean`, which removes those whose child has "
        "ended and keeps the branches that hold commits.")
    tree_commands = trees.add_subparsers(dest="action", required=True, metavar="ACTION")
    listed = tree_commands.add_parser("list", parents=[common],
                                      help="each worktree, its child's status and branch")
    listed.add_argument("--json", action="store_true", help="as a JSON list")
    tree_commands.add_parser("clean", parents=[common],
                             help="remove the worktrees of children that have ended")

    add_rollout_commands(commands, common)
    add_watch_command(commands, common)
    return parser


def _add_mcp_command(commands: argparse._SubParsersAction,  # type: ignore[type-arg]
                     common: argparse.ArgumentParser,
                     model_options: argparse.ArgumentParser) -> None:
    mcp = commands.add_parser(
        "mcp", parents=[common, model_options],
        help="serve the sub-session tools to an MCP host (stdio, or --http)",
        description="An MCP server offering create_session, wait_session, wait_sessions, "
        "cancel_session, run_session, run_sessions, list_sessions and send_message, and each "
        "session's transcript as the resource rollout://{id}; each client connection is one "
        "top-level session.",
    )
    mcp.add_argument("--http", metavar="HOST:PORT",
                     help="serve streamable HTTP instead of stdio (loopback by default)")
    mcp.add_argument("--session-idle-timeout", type=idle_timeout_option, metavar="SECONDS",
                     help="HTTP: close a client's session, cancelling its running "
                     "sub-sessions, after this long with no request and no open stream "
                     "(default 120, at most 2592000: 30 days)")
