"""What a failed attempt at an OpenAI-compatible server means: retry, fall back, or stop.

Only the transport (a refused, dropped or stalled connection) and the server's own
trouble (429, 5xx) are retried, and only the transport is called a connection error;
every message names the provider and its URL. A local bug is not an SDK or transport
error and goes up as itself, at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Callable
from typing import Any

import openai
from attrs import frozen

from subsessions.errors import MalformedStream, ModelError, ModelUnavailable

MAX_RETRY_AFTER = 60.0
# The transport errors of the HTTP stacks the SDK has used (httpx, httpx2, httpcore); a
# recent SDK wraps them in APIConnectionError, an older one lets them out mid-stream.
_TRANSPORT_MODULES = ("httpx", "httpx2", "httpcore", "httpcore2", "anyio")
_TRANSPORT_BASES = ("TransportError", "RequestError", "EndOfStream", "BrokenResourceError")


class Retryable(Exception):
    """A failure worth another attempt: 429, 5xx, a dropped or stalled stream."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@frozen
class Endpoint:
    """Who is asked, for messages: the provider's name and its base URL."""

    provider: str
    base_url: str
    wire_api: str  # "responses" or "chat"

    def __str__(self) -> str:
        return f"{self.provider} at {self.base_url}"


def _retry_after(response: Any) -> float | None:
    headers = getattr(response, "headers", None) or {}
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, min(float(value) * scale, MAX_RETRY_AFTER))
        except ValueError:
            return None
    return None


def _error_field(exc: openai.APIStatusError, key: str) -> Any:
    """A field of the `{"error": {...}}` body (vLLM sends it unwrapped), or None."""
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error", body)
    return error.get(key) if isinstance(error, dict) else None


_MESSAGE_CHARS = 500
_FRAME = re.compile(r"^\s+File \"", re.MULTILINE)


def _server_message(exc: openai.APIStatusError) -> str:
    """The server's message as one line: llama.cpp's server (any Python server's 500)
    appends traceback frames, and pydantic's validation errors span many lines."""
    message = _error_field(exc, "message")
    text = message if isinstance(message, str) and message else str(exc.message)
    text = " ".join(_FRAME.split(text, maxsplit=1)[0].split())
    return text if len(text) <= _MESSAGE_CHARS else text[:_MESSAGE_CHARS - 3] + "..."


def _is_model_missing(exc: openai.APIStatusError) -> bool:
    """A model the server does not have, as opposed to a path it does not serve.

    OpenAI says `code: model_not_found`; Ollama and vLLM only say so in the message.
    """
    if _error_field(exc, "code") == "model_not_found":
        return True
    text = _server_message(exc).lower()
    return exc.status_code in (400, 404) and "model" in text and (
        "not found" in text or "does not exist" in text
    )


def _not_served(exc: openai.APIStatusError, endpoint: Endpoint) -> ModelError:
    """A 404 for the path itself: the wrong wire API or a base URL without /v1."""
    url = str(exc.request.url) if exc.request is not None else endpoint.base_url
    hints = []
    if endpoint.wire_api == "responses":
        hints.append("the server may only speak Chat Completions (--wire-api chat)")
    if not endpoint.base_url.rstrip("/").endswith("/v1"):
        hints.append("the base URL may lack /v1")
    hint = " or ".join(hints) or "check the base URL"
    return ModelError(f"{endpoint.provider} answered HTTP 404 for {url}: {hint}")


def _is_transport(exc: BaseException) -> bool:
    if isinstance(exc, openai.APIConnectionError | OSError):
        return True
    return any(
        base.__module__.split(".")[0] in _TRANSPORT_MODULES and base.__name__ in _TRANSPORT_BASES
        for base in type(exc).__mro__
    )


def _transport_detail(exc: BaseException) -> str:
    """What the transport said at the bottom (the SDK's own text is "Connection error.")."""
    seen = [exc]
    while (inner := seen[-1].__cause__ or seen[-1].__context__) is not None and len(seen) < 16:
        seen.append(inner)
    root = seen[-1]
    if isinstance(root, OSError) and root.errno is not None and root.errno > 0:
        return os.strerror(root.errno)
    if isinstance(root, OSError) and root.strerror:
        return root.strerror
    return str(root) or type(root).__name__


def classify(exc: BaseException, endpoint: Endpoint) -> BaseException:
    """Map a failed attempt to Retryable, ModelUnavailable, a final ModelError, or itself."""
    return classify_with(openai, _status, exc, endpoint)


def classify_with(sdk: Any, status: Callable[[Any, Endpoint], BaseException],
                  exc: BaseException, endpoint: Endpoint) -> BaseException:
    """`classify` for an SDK of the same make as `openai` (the `anthropic` SDK is: the same
    error classes), whose HTTP errors `status` maps."""
    if isinstance(exc, ModelError | Retryable | asyncio.CancelledError):
        return exc
    if isinstance(exc, sdk.APIStatusError):
        return status(exc, endpoint)
    if isinstance(exc, sdk.APIConnectionError) or _is_transport(exc):
        return Retryable(f"connection to {endpoint} failed: {_transport_detail(exc)}")
    if isinstance(exc, sdk.APIResponseValidationError | json.JSONDecodeError):
        return MalformedStream(f"malformed response from {endpoint.provider}: {exc}")
    if isinstance(exc, sdk.APIError):
        return ModelError(f"{endpoint.provider} stream error: {exc.message}")
    return exc  # a local bug: no request problem, no retry


def _status(exc: openai.APIStatusError, endpoint: Endpoint) -> BaseException:
    status = exc.status_code
    detail = f"{endpoint} returned HTTP {status}: {_server_message(exc)}"
    if status == 429 or status >= 500:
        return Retryable(detail, _retry_after(exc.response))
    if _is_model_missing(exc):
        return ModelUnavailable(detail)
    if status == 404:
        return _not_served(exc, endpoint)
    return ModelError(detail)

