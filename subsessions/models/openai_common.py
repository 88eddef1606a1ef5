"""What both OpenAI wire clients share: retries, stall detection, fallback, clean text.

The SDK's own retries are switched off (`max_retries=0`): a stream can also drop
or stall after the request succeeded, and one policy should cover every case.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import orjson

from subsessions.errors import InvalidHistory, ModelError, ModelUnavailable
from subsessions.items import Item, message_text
from subsessions.models.base import ModelRequest, ModelResponse, TokenUsage, estimate_tokens
from subsessions.models.openai_errors import Endpoint, Retryable, classify

log = logging.getLogger("subsessions")
T = TypeVar("T")
Classifier = Callable[[BaseException, Endpoint], BaseException]
"""What a failed attempt means on one wire: Retryable, ModelUnavailable, ModelError, itself."""


class SdkClient(Protocol):
    """What the shared base needs of an SDK client (`AsyncOpenAI`, `AsyncAnthropic`)."""

    @property
    def base_url(self) -> Any: ...

    async def close(self) -> None: ...


C = TypeVar("C", bound=SdkClient)
MAX_COUNT = 2**40
"""The most tokens a server's count may say: about 10^12, past any context window by far, and
low enough that a session's sums stay within the 64-bit integers a rollout holds (orjson's
limit) for millions of calls."""
Counts = tuple[Any, Any, Any, Any]
"""A server's usage as sent: input, output, cached input, reasoning output (any JSON)."""
Answer = tuple[tuple[Item, ...], Counts | None]
"""One attempt's output items, and the usage the server reported (None: it reported none)."""
USAGE_GRACE = 2.0
"""How long Chat's usage chunk is waited for after the finish_reason."""
END_GRACE = 0.1
"""How long a complete answer's stream may take to end on its own: read to its end, the
connection is reused; a server that never ends the body is left after this."""


async def next_event(
    iterator: AsyncIterator[T], idle_timeout: float, *, complete: bool = False
) -> T | None:
    """The next stream event, or None at the end of the stream.

    Until the answer is `complete`, a gap longer than `idle_timeout` is a retryable
    stall; after it, a gap only ends the stream: the server has said everything.
    """
    try:
        async with asyncio.timeout(idle_timeout):
            return await anext(iterator)
    except StopAsyncIteration:
        return None
    except TimeoutError:
        if complete:
            return None
        raise Retryable(f"stream idle for more than {round(idle_timeout * 1000)}ms") from None


async def answer_events(
    stream: Any, idle_timeout: float, ends: Callable[[Any], bool]
) -> AsyncGenerator[Any, None]:
    """A streamed answer's events up to the one that `ends` it (a gap longer than
    `idle_timeout` before it is a stall); after it the rest is read, `END_GRACE` at most, so
    the connection can be reused. Leaving closes the stream, whether the body ended or not:
    iterate it under `contextlib.aclosing`."""
    complete = False
    async with stream:
        iterator = aiter(stream)
        while (event := await next_event(iterator, END_GRACE if complete else idle_timeout,
                                         complete=complete)) is not None:
            if not complete:
                complete = ends(event)
                yield event


def required(item: Item, key: str) -> Any:
    """A field the wire format needs: its absence is a broken history, not a server fault."""
    try:
        return item[key]
    except KeyError:
        kind = item.get("type", "untyped")
        raise InvalidHistory(f"a {kind} item without {key} cannot be sent to the model") from None


def valid_unicode(value: Any) -> Any:
    """`value` with every string valid Unicode, whatever JSON the server sent.

    JSON may carry UTF-16 surrogate halves (`"\\ud83d"` then `"\\ude00"`) in separate
    chunks: joined, a pair becomes its character; a half that never pairs becomes U+FFFD.
    """
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return value
    if isinstance(value, dict):
        return {k: valid_unicode(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(valid_unicode(v) for v in value)
    return value


async def opened_within(opening: Awaitable[T], idle_timeout: float) -> T:
    """The response headers must arrive within the idle timeout too: a silent server stalls."""
    try:
        async with asyncio.timeout(idle_timeout):
            return await opening
    except TimeoutError:
        raise Retryable(
            f"no response within {round(idle_timeout * 1000)}ms of sending the request"
        ) from None


_SENT = ("instructions", "system", "messages", "input", "tools")


def estimated_usage(arguments: dict[str, Any], output: tuple[Item, ...]) -> TokenUsage:
    """What a call cost when the server did not say (llama.cpp's server streams no usage):
    the request as sent (instructions, history, tool list, as JSON) and the answer's text
    (messages, reasoning, each call's name and arguments), at `CHARS_PER_TOKEN`."""
    sent = sum(len(orjson.dumps(arguments[key])) for key in _SENT if key in arguments)
    made = 0
    for item in output:
        if item.get("type") == "function_call":
            made += len(str(item.get("name", ""))) + len(str(item.get("arguments", "")))
        elif item.get("type") == "reasoning":
            made += sum(len(str(s.get("text", ""))) for s in item.get("summary", ()))
        else:
            made += len(message_text(item) or "")
    return TokenUsage(estimate_tokens(sent), estimate_tokens(made), estimated=True)


def reported_usage(counts: Counts) -> TokenUsage | None:
    """The usage a server reported, if every count is a whole number of tokens from 0 to
    `MAX_COUNT` (cached and reasoning may be absent: 0); else None, for the estimate."""
    given, made, cached, reasoning = counts
    numbers = (given, made, 0 if cached is None else cached,
               0 if reasoning is None else reasoning)
    if not all(type(n) is int and 0 <= n <= MAX_COUNT for n in numbers):
        return None
    return TokenUsage(*numbers)


def _shown(counts: Counts) -> str:
    names = ("input", "output", "cached", "reasoning")
    return ", ".join(f"{name} {count!r:.40}" for name, count in zip(names, counts, strict=True))


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

    async def run(self, attempt_once: Callable[[], Awaitable[T]], endpoint: Endpoint,
                  classifier: Classifier = classify) -> T:
        attempt = 0
        while True:
            try:
                return await attempt_once()
            except Exception as raw:
                exc = classifier(raw, endpoint)
                if not isinstance(exc, Retryable):
                    if exc is raw:  # our own error, or a local bug: as it is
                        raise
                    raise exc from raw
                if attempt >= self.max_retries:
                    tries = f"{attempt + 1} attempts" if attempt else "1 attempt"
                    raise ModelError(f"{exc} (gave up after {tries})") from raw
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


class OpenAIModel(Generic[C]):
    """What the wire clients share: one SDK client, the retry policy, the fallbacks.

    A subclass turns a request into the call's arguments in `_arguments` (once per
    model: a history it cannot send fails before any request) and streams one attempt
    in `_stream_once`: its output and the counts the server sent, checked here.
    """

    wire_api: ClassVar[str]

    def __init__(
        self,
        client: C,
        *,
        provider: str = "openai",
        retry: RetryPolicy | None = None,
        stream_idle_timeout: float = 300.0,
        max_output_tokens: int | None = None,
    ) -> None:
        self.client = client
        self.provider = provider
        self.endpoint = Endpoint(provider, str(client.base_url).rstrip("/"), self.wire_api)
        self.retry = retry or RetryPolicy()
        self.stream_idle_timeout = stream_idle_timeout
        self.max_output_tokens = max_output_tokens  # each call's cap; None: the server's
        self._doubted: set[str] = set()  # sessions told that their server's usage was unusable

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.endpoint}>"

    async def aclose(self) -> None:
        await self.client.close()

    async def respond(self, request: ModelRequest) -> ModelResponse:
        return await respond_with_fallback(request, self.respond_as)

    async def respond_as(self, request: ModelRequest, model: str) -> ModelResponse:
        """One model of the request's candidates (`ModelUnavailable` if not served)."""
        arguments = self._arguments(request, model)

        async def attempt() -> Answer:
            return await self._stream_once(arguments)

        output, counts = await self.retry.run(attempt, self.endpoint, self._classify)
        usage = None if counts is None else self._usage(request.session_id, counts)
        return ModelResponse(output=valid_unicode(output),
                             usage=usage or estimated_usage(arguments, output), model=model)

    def _usage(self, session_id: str, counts: Counts) -> TokenUsage | None:
        """What the server reported, checked here for both wire APIs: counts that are not
        counts (negative, huge, text, fractions, null) are dropped for the estimate, with one
        warning per session; a task that was answered is never failed by its usage."""
        usage = reported_usage(counts)
        if usage is None and session_id not in self._doubted:
            self._doubted.add(session_id)
            log.warning("%s reported token usage that is not whole numbers from 0 to 2**40 "
                        "(%s): session %s counts estimates instead", self.endpoint,
                        _shown(counts), session_id)
        return usage

    @property
    def usage_grace(self) -> float:
        return min(USAGE_GRACE, self.stream_idle_timeout)

    def _classify(self, exc: BaseException, endpoint: Endpoint) -> BaseException:
        """What a failed attempt means on this wire (the OpenAI SDK's errors here)."""
        return classify(exc, endpoint)

    def _arguments(self, request: ModelRequest, model: str) -> dict[str, Any]:
        raise NotImplementedError

    async def _stream_once(self, arguments: dict[str, Any]) -> Answer:
        raise NotImplementedError
