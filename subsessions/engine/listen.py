"""Where a wire app listens (`subsessions mcp --http`, `subsessions a2a --http`): the address,
the one loopback rule, and the bound socket.

Both apps spend the configured model account for whoever reaches them and read the home's
rollouts, so both listen on loopback unless the operator opts in by name; one rule, here,
so the two cannot drift apart.
"""

from __future__ import annotations

import os
import socket

from subsessions._util.urls import is_loopback_host
from subsessions.errors import ConfigError


def parse_http_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:PORT` for IPv6) -> (host, port); ConfigError when malformed."""
    host, sep, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ConfigError("command line", "--http",
                          f"{text!r} is not HOST:PORT, e.g. 127.0.0.1:8765")
    return host, int(port_text)


def remote_allowed(allow_env: str, flag: object = False) -> bool:
    """The operator's opt-in: `flag` (a library caller's), or `allow_env` set to non-zero."""
    return bool(flag) or os.environ.get(allow_env, "") not in ("", "0")


def check_http_host(host: str, allow_remote: bool, *, server: str = "the MCP server",
                    allow_env: str = "SUBSESSIONS_MCP_ALLOW_REMOTE",
                    guarded: str = "has no authentication") -> None:
    """Loopback, or the operator's explicit opt-in; else one line saying why not."""
    if is_loopback_host(host) or allow_remote:
        return
    raise ConfigError(
        "command line", "--http",
        f"refusing to listen on {host}: {server} {guarded}, so anyone who "
        "can reach it could run sub-sessions on your model account and read your rollouts; "
        f"use a loopback address such as 127.0.0.1, or set {allow_env}=1 to serve it "
        "anyway (behind your own authentication)",
    )


def shown_host(host: str) -> str:
    """`host` as a URL names it (`[::1]`)."""
    return f"[{host}]" if ":" in host else host


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (before the URL is printed: a client may dial it at once).

    TCP_NODELAY is set here, so every accepted connection inherits it: uvicorn writes a
    response's head and body apart, and with Nagle's algorithm on, a keep-alive client's
    delayed ACK held each answer about 40 ms (measured: 44 ms a request against 1.5)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ConfigError("command line", "--http", f"cannot listen on {host}:{port}: "
                          f"{exc.strerror or exc}") from None
    return sock
