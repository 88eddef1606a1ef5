"""URL checks shared by config.toml and MCP server tables (L0: imports nothing of the package)."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlparse


def url_problem(url: str) -> str | None:
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return f"{url!r} is not an http(s) URL"
    return None


def is_loopback(url: str) -> bool:
    return is_loopback_host(urlparse(url).hostname or "")


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
