"""`subsessions a2a --http HOST:PORT [--auth-token-env NAME] [model options]`.

Every flag is checked before anything is imported or bound, each mistake one line; the SDK
(the `[a2a]` extra) is imported only here, with the line to install it when it is missing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

from subsessions.engine import listen
from subsessions.errors import ConfigError, SubsessionError
from subsessions.settings import Settings, api_key

ALLOW_REMOTE_ENV = "SUBSESSIONS_A2A_ALLOW_REMOTE"
A2A_EXTRA = "pip install 'subsessions[a2a]'"
_SDK_MODULES = {"a2a", "uvicorn", "starlette", "sse_starlette", "httpx", "google", "culsans"}


def run_a2a_command(args: argparse.Namespace, home: Path, settings: Settings) -> int:
    """Serve until a signal; returns the exit code."""
    from subsessions.a2a.callers import read_tokens

    if not args.http:
        raise ConfigError("command line", "--http", "is required: HOST:PORT, e.g. "
                          "127.0.0.1:8765")
    host, port = listen.parse_http_address(args.http)
    if args.keep_open < 0:
        raise ConfigError("command line", "--keep-open", "must be >= 0")
    tokens = read_tokens(args.auth_token_env, dict(os.environ))
    listen.check_http_host(host, listen.remote_allowed(ALLOW_REMOTE_ENV),
                           server="the A2A server", allow_env=ALLOW_REMOTE_ENV,
                           guarded=("serves without TLS" if tokens
                                    else "has no authentication (--auth-token-env)"))
    api_key(settings.provider)  # a missing key is told now, not at the first task
    try:
        from subsessions.a2a import server
    except ModuleNotFoundError as exc:
        package = (exc.name or "").split(".")[0]
        if package not in _SDK_MODULES:
            raise
        raise SubsessionError(f"`subsessions a2a` needs the A2A SDK ({package} is missing): "
                              f"{A2A_EXTRA}") from None
    try:
        return asyncio.run(server.serve(home, settings, host, port, tokens,
                                        keep_open=args.keep_open))
    except KeyboardInterrupt:
        return 130
