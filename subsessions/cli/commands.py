"""The descriptions of the commands beside `run` (argparse's side), apart from their
runners: building the parser imports no engine, so `subsessions mcp` starts fast."""

from __future__ import annotations

import argparse
from typing import Any

from subsessions.engine.control import CONTROL_HELP
from subsessions.errors import ConfigError
from subsessions.mcp.server import check_idle_timeout
from subsessions.rollouts.status import STATUSES
from subsessions.serve import LOG_LEVELS


def add_serve_command(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    serve = commands.add_parser(
        "serve", parents=parents,
        help="be a Copilot CLI runtime: the official Copilot SDKs drive sub-sessions",
        description="Speaks the GitHub Copilot CLI runtime protocol (JSON-RPC, protocol "
        "version 3), so a Copilot SDK host drives sessions and sub-sessions on the configured "
        "model. With --stdio it serves on stdin/stdout (what the SDKs' stdio connection "
        "passes). Without --stdio it listens on 127.0.0.1 (--port N, else any free port, as "
        "the SDKs' TCP connection expects) and prints 'listening on port N'.",
    )
    transport = serve.add_mutually_exclusive_group()
    transport.add_argument("--stdio", action="store_true", help="serve on stdin/stdout")
    transport.add_argument("--port", type=int, metavar="N",
                           help="listen on 127.0.0.1:N (default without --stdio: any free "
                           "port)")
    serve.add_argument("--log-level", choices=sorted(LOG_LEVELS), default="warning",
                       help="what goes to stderr (default warning)")
    for flag in ("--headless", "--no-auto-update", "--no-auto-login", "--remote"):
        serve.add_argument(flag, action="store_true", help=argparse.SUPPRESS)
    for flag in ("--auth-token-env", "--session-idle-timeout"):
        serve.add_argument(flag, help=argparse.SUPPRESS)  # the SDKs pass them; nothing applies


def add_a2a_command(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    a2a = commands.add_parser(
        "a2a", parents=parents,
        help="serve sessions as A2A (Agent2Agent) tasks over HTTP",
        description="An A2A server (the official a2a-sdk; the [a2a] extra): message/send and "
        "message/stream start a top-level session (a new contextId) or continue one the "
        "caller made; tasks/get, tasks/list, tasks/cancel (with the children), "
        "tasks/resubscribe and push-notification configs; the agent card at "
        "/.well-known/agent-card.json has a skill per profile. Loopback only unless "
        "SUBSESSIONS_A2A_ALLOW_REMOTE=1.")
    a2a.add_argument("--http", metavar="HOST:PORT", required=True,
                     help="where to listen, e.g. 127.0.0.1:8765 (port 0: any free one)")
    a2a.add_argument("--auth-token-env", metavar="NAME",
                     help="the variable holding the bearer token (several: comma-separated, "
                     "one caller each); requests without it get 401")
    a2a.add_argument("--keep-open", type=int, default=64, metavar="N",
                     help="idle contexts whose sessions stay open for follow-ups (default "
                     "64); an older one is resumed from its rollout when followed up")


def add_batch_command(commands: Any, parents: list[argparse.ArgumentParser]) -> None:
    batch = commands.add_parser(
        "batch", parents=parents,
        help="one sub-session per row of a CSV or line of a JSONL file, journaled",
        description="Runs PROFILE once per item of INPUT (.csv with a header row, or .jsonl), "
        "the prompt a template over the item's fields ({column}; {{ and }} for braces), at "
        "most --concurrency at once, and writes one line per item to --out (.jsonl or .csv). "
        "Journaled under HOME/batches/ with its model options (never a key): --resume "
        "BATCH_ID runs only the items that did not complete, with the limits given then. "
        "Exit 0 when every item completed.")
    batch.add_argument("input", nargs="?", help="a .csv or .jsonl file")
    batch.add_argument("--profile", help="the profile every item's sub-session starts from")
    batch.add_argument("--prompt", help="the prompt template, e.g. 'Summarise {title}'")
    batch.add_argument("--out", help="where results go: .jsonl or .csv (a new file)")
    batch.add_argument("--force", action="store_true", help="replace --out if it exists")
    batch.add_argument("--concurrency", type=int, help="sub-sessions at once (default 16)")
    batch.add_argument("--budget-turns", type=int, metavar="N", help="model calls per item")
    batch.add_argument("--budget-tokens", type=int, metavar="N", help="tokens per item")
    batch.add_argument("--budget-seconds", type=float, metavar="S", help="seconds per item")
    batch.add_argument("--resume", metavar="BATCH_ID", help="continue this batch")
    batch.add_argument("--output-schema", metavar="FILE",
                       help="a JSON Schema file: each item's sub-session answers a value that "
                       "matches it (a .csv output gets a column per top-level property)")
    batch.add_argument("--control", action="store_true", help=CONTROL_HELP)
    batch.add_argument("--progress-every", type=float, default=5.0, metavar="S",
                       help="without a terminal: a progress line every S seconds (default 5)")


def add_rollout_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    colour = argparse.ArgumentParser(add_help=False)
    colour.add_argument(
        "--color", choices=("auto", "always", "never"), default="auto",
        help="colour the output (auto: on a terminal unless NO_COLOR is set)",
    )
    shared = [common, colour]
    rollouts = commands.add_parser("rollouts", help="inspect rollout files")
    actions = rollouts.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser(
        "list", parents=shared, help="sessions, newest first",
        description="Sessions, newest first. As with grep, the exit code is 1 when no "
        "session is listed (stderr says why), so a script can test for a match.",
    )
    listing.add_argument("--parent", metavar="ID", help="only children of this session")
    listing.add_argument("--source", help="cli, exec, mcp or subsession")
    listing.add_argument("--status", choices=STATUSES)
    listing.add_argument(
        "--since", metavar="WHEN", help="started at or after: ISO date/time, or an age (30m, 2d)"
    )
    listing.add_argument("--limit", type=int, default=50, help="rows per page (0: all)")
    listing.add_argument("--cursor", metavar="ID", help="the next page: rows older than this id")
    listing.add_argument("--json", action="store_true", help="one JSON object a line")

    show = actions.add_parser("show", parents=shared, help="a readable transcript")
    show.add_argument("id", help="a session id or a unique prefix of one")

    tree = actions.add_parser("tree", parents=shared, help="parents, children, grandchildren")
    tree.add_argument("id", nargs="?", help="the root session (default: every top-level one)")

    tail = actions.add_parser("tail", parents=shared, help="the last records; --follow for more")
    tail.add_argument("id", help="a session id or a unique prefix of one")
    tail.add_argument("-n", "--lines", type=int, default=10, help="records to start with")
    tail.add_argument(
        "-f", "--follow", action="store_true",
        help="print records as they are written, until the task ends or its process is gone",
    )
    tail.add_argument("--raw", action="store_true", help="the JSONL lines as written")
    tail.add_argument("--interval", type=float, default=0.25, help=argparse.SUPPRESS)


def add_watch_command(commands: Any, common: argparse.ArgumentParser) -> None:
    watch = commands.add_parser(
        "watch", parents=[common], help="a live tree of the sessions (--once: print it)",
        description="A live tree of the home's sessions, updated as their rollouts grow: "
        "status, turns, tokens, tool calls, elapsed time and the last message, with subtree "
        "totals on every parent. Keys: arrows select, Enter shows the transcript, c cancels "
        "and m messages the selected session (its engine started with --control), q quits.",
    )
    watch.add_argument("id", nargs="?", metavar="SESSION_ID",
                       help="only this session's tree (an id or a unique prefix)")
    watch.add_argument("--once", action="store_true", help="print the tree once as text")
    watch.add_argument("--limit", type=int, default=50,
                       help="the newest N top-level sessions, with their trees (0: all)")
    watch.add_argument("--interval", type=float, default=0.25, help=argparse.SUPPRESS)


def idle_timeout_option(text: str) -> float:
    """argparse's `type` for `--session-idle-timeout`: refused at parse time (exit 2)."""
    try:
        return check_idle_timeout(float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(exc.problem) from None
