"""What a failed attempt at a Messages API server means: retry, fall back, or stop.

429, 529 (`overloaded_error`, also as an error event inside a 200 stream), 5xx and the
transport are retried (`retry-after` honoured, as on the OpenAI wires); everything else is one
line naming the provider, the status, the API's `error.type` and its message.
"""

from __future__ import annotations

import anthropic

from subsessions.errors import ModelError, ModelUnavailable
from subsessions.models.openai_errors import Endpoint, Retryable, _retry_after, classify_with

_MESSAGE_CHARS = 500
_RETRIED_TYPES = ("overloaded_error", "api_error", "rate_limit_error")


def _error_of(exc: anthropic.APIStatusError) -> tuple[str, str]:
    """The body's `error.type` and `error.message`, else what the SDK made of the body."""
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error")
    error = error if isinstance(error, dict) else {}
    kind, message = error.get("type"), error.get("message")
    kind = kind if isinstance(kind, str) and kind else "error"
    text = message if isinstance(message, str) and message else str(exc.message)
    text = " ".join(text.split())
    if len(text) > _MESSAGE_CHARS:
        text = text[:_MESSAGE_CHARS - 3] + "..."
    return " ".join(kind.split())[:80], text


def _should_retry(exc: anthropic.APIStatusError, kind: str) -> bool:
    told = exc.response.headers.get("x-should-retry")
    if told in ("true", "false"):
        return told == "true"
    status = exc.status_code
    return status in (408, 429) or status >= 500 or kind in _RETRIED_TYPES


def classify(exc: BaseException, endpoint: Endpoint) -> BaseException:
    """Map a failed attempt to Retryable, ModelUnavailable, a final ModelError, or itself."""
    return classify_with(anthropic, _status, exc, endpoint)


def _status(exc: anthropic.APIStatusError, endpoint: Endpoint) -> BaseException:
    status = exc.status_code
    kind, message = _error_of(exc)
    where = "in its stream" if status == 200 else ""  # an error event after the 200
    detail = f"{endpoint} returned HTTP {status} {where}{' ' if where else ''}{kind}: {message}"
    if _should_retry(exc, kind):
        return Retryable(detail, _retry_after(exc.response))
    if status == 404 and kind == "not_found_error" and message.startswith("model:"):
        return ModelUnavailable(detail)
    if status == 404 and endpoint.base_url.endswith("/v1"):
        return ModelError(f"{detail} (the base URL should not end in /v1: the SDK adds "
                          "/v1/messages)")
    return ModelError(detail)

