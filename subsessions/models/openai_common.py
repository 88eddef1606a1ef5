"""What both OpenAI wire clients share: retries, stall detection, fallback, error texts.

The SDK's own retries are switched off (`max_retries=0`): a stream can also drop
or stall after the request succeeded, and one policy should cover every case.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import openai

from subsessions.errors import MalformedStream, ModelError, ModelUnavailable
from subsessions.models.base import ModelRequest, ModelResponse

T = TypeVar("T")

MAX_RETRY_AFTER = 60.0




class Retryable(Exception):
    """A failure worth another attempt: 429, 5xx, a dropped or stalled stream."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


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


def _is_model_missing(exc: openai.APIStatusError) -> bool:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error", body) if isinstance(body, dict) else {}
    code = error.get("code") if isinstance(error, dict) else None
    text = str(exc.message).lower()
    if code == "model_not_found" or exc.status_code == 404:
        return True
    return exc.status_code == 400 and "model" in text and (
        "not found" in text or "does not exist" in text
    )


def classify(exc: BaseException, provider: str) -> BaseException:
    """Map an SDK or transport exception to retryable, unavailable, or a final ModelError."""
    if isinstance(exc, ModelError | Retryable | asyncio.CancelledError):
        return exc
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        detail = f"{provider} returned HTTP {status}: {exc.message}"
        if status == 429 or status >= 500:
            return Retryable(detail, _retry_after(exc.response))
        if _is_model_missing(exc):
            return ModelUnavailable(detail)
        return ModelError(detail)
    if isinstance(exc, openai.APITimeoutError | openai.APIConnectionError):
        return Retryable(f"connection to {provider} failed: {exc}")
    if isinstance(exc, ValueError | openai.APIResponseValidationError):
        return MalformedStream(f"malformed response from {provider}: {exc}")
    if isinstance(exc, openai.APIError):
        return ModelError(f"{provider} stream error: {exc.message}")
    # Anything else from the transport mid-stream (a dropped connection, a reset).
    return Retryable(f"connection to {provider} dropped: {type(exc).__name__}: {exc}")


async def next_or_stall(iterator: AsyncIterator[T], idle_timeout: float) -> T:
    """The next stream event; a gap longer than `idle_timeout` is a retryable stall."""
    try:
        async with asyncio.timeout(idle_timeout):
            return await anext(iterator)
    except TimeoutError:
        raise Retryable(f"stream idle for more than {round(idle_timeout * 1000)}ms") from None


async def opened_within(opening: Awaitable[T], idle_timeout: float) -> T:
    """The response headers must arrive within the idle timeout too: a silent server stalls."""
    try:
        async with asyncio.timeout(idle_timeout):
            return await opening
    except TimeoutError:
        raise Retryable(
            f"no response within {round(idle_timeout * 1000)}ms of sending the request"
        ) from None


class RetryPolicy:
    """Exponential backoff with jitter, honouring Retry-After, at most `max_retries` retries."""

    def __init__(self, max_retries: int = 4, base_delay: float = 0.5, max_delay: float = 20.0):
        self.max_retries = max_retries
        self.base_delay = base_delay
        self.max_delay = max_delay

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return retry_after
        backoff: float = self.base_delay * (2.0**attempt)
        return min(self.max_delay, backoff) * random.uniform(0.5, 1.0)

    async def run(self, attempt_once: Callable[[], Awaitable[T]], provider: str) -> T:
        attempt = 0
        while True:
            try:
                return await attempt_once()
            except Exception as raw:
                exc = classify(raw, provider)
                if not isinstance(exc, Retryable):
                    raise exc from raw
                if attempt >= self.max_retries:
                    raise ModelError(
                        f"{exc} (gave up after {attempt + 1} attempts)"
                    ) from raw
                await asyncio.sleep(self.delay(attempt, exc.retry_after))
                attempt += 1


async def respond_with_fallback(
    request: ModelRequest,
    respond_as: Callable[[ModelRequest, str], Awaitable[ModelResponse]],
) -> ModelResponse:
    """Try the request's model, then each fallback in order while the model is unavailable."""
    candidates = (request.model, *request.fallback_models)
    unavailable: list[str] = []
    for model in candidates:
        try:
            response = await respond_as(request, model)
        except ModelUnavailable as exc:
            unavailable.append(str(exc))
            continue
        return response
    raise ModelError("no model available: " + "; ".join(unavailable))


class OpenAIModel:
    """What both wire clients share: one `AsyncOpenAI`, the retry policy, the fallbacks.

    A subclass streams one attempt at one model in `_stream_once`.
    """

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        *,
        provider: str = "openai",
        retry: RetryPolicy | None = None,
        stream_idle_timeout: float = 300.0,
    ) -> None:
        self.client = client
        self.provider = provider
        self.retry = retry or RetryPolicy()
        self.stream_idle_timeout = stream_idle_timeout

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.provider} {self.client.base_url}>"

    async def aclose(self) -> None:
        await self.client.close()

    async def respond(self, request: ModelRequest) -> ModelResponse:
        return await respond_with_fallback(request, self._respond_as)

    async def _respond_as(self, request: ModelRequest, model: str) -> ModelResponse:
        async def attempt() -> ModelResponse:
            return await self._stream_once(request, model)

        return await self.retry.run(attempt, self.provider)

    async def _stream_once(self, request: ModelRequest, model: str) -> ModelResponse:
        raise NotImplementedError
