"""Who is calling: the bearer token a request carries names its caller.

A2A over HTTP has no connection to scope sessions by, so the credential does: every task
and context belongs to the caller that created it (the SDK's task store is scoped by the
name given here), and another caller's is `task not found` (`access.py`'s one rule). With
`--auth-token-env NAME`, NAME holds the accepted tokens (one, or several separated by
commas: one caller each) and a request without one of them is 401. Without it the server
trusts its loopback clients: a request with no token is the anonymous caller, and a token
(any) is a caller of its own, unguessable by the others. Tokens are never kept: a caller
is named by a digest of its token. The agent card is public, as discovery needs.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING, Any

from subsessions.errors import ConfigError

if TYPE_CHECKING:
    from a2a.server.context import ServerCallContext

ANONYMOUS = "anonymous"


def read_tokens(env_name: str | None, environ: dict[str, str]) -> tuple[str, ...] | None:
    """The accepted tokens (None: no authentication); a missing or empty variable is an
    error now, never a server that accepts everyone."""
    if env_name is None:
        return None
    tokens = tuple(t.strip() for t in environ.get(env_name, "").split(",") if t.strip())
    if not tokens:
        raise ConfigError("command line", "--auth-token-env",
                          f"{env_name} is not set (or empty): it must hold the bearer token")
    return tokens


def caller_name(token: str) -> str:
    if not token:
        return ANONYMOUS
    return "token-" + hashlib.sha256(token.encode()).hexdigest()[:32]


def caller_of(context: ServerCallContext) -> str:
    """The caller a request context belongs to (the name the task store scopes by)."""
    return context.user.user_name or ANONYMOUS


def bearer_of(headers: Any) -> str:
    scheme, _, token = str(headers.get("authorization", "")).partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def backend(tokens: tuple[str, ...] | None, public_paths: frozenset[str]) -> Any:
    """A Starlette `AuthenticationBackend` naming each request's caller."""
    from starlette.authentication import (
        AuthCredentials,
        AuthenticationBackend,
        AuthenticationError,
        SimpleUser,
    )
    from starlette.requests import HTTPConnection

    class Bearer(AuthenticationBackend):
        async def authenticate(self, conn: HTTPConnection) -> Any:
            if conn.url.path in public_paths:
                return None
            token = bearer_of(conn.headers)
            if tokens is not None and not any(
                    hmac.compare_digest(token.encode(), t.encode()) for t in tokens):
                raise AuthenticationError("missing or wrong bearer token")
            return AuthCredentials(["caller"]), SimpleUser(caller_name(token))

    return Bearer()


def unauthorized(_conn: Any, exc: Exception) -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse({"error": str(exc)}, status_code=401,
                        headers={"WWW-Authenticate": 'Bearer realm="subsessions"'})
