"""A child that is a remote A2A agent (a profile's `a2a_url`), as a model client.

The child is an ordinary sub-session whose one "model call" is an A2A exchange: its new user
text goes to the agent as `message/send` (streamed when the agent's card says it streams), and
the agent's final text is the answer. So create, wait, cancel and list need no change in the
core, and the child's rollout records the exchange as its user and agent messages, under the
sub-agent `source` of its profile. Cancelling the call (the child cancelled) sends
`tasks/cancel`; `input-required` fails the child with the agent's question (children never
block on a human); an unreachable agent or a bad card is one line. A follow-up task of the
child continues the agent's `contextId`. The agent reports no usage: tokens are estimated.

The official `a2a-sdk` client is imported on the first call (the `[a2a]` extra).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import TYPE_CHECKING, Any

from subsessions.errors import ModelError, RemoteAgentError
from subsessions.items import assistant_message, is_assistant_message, message_text
from subsessions.models.base import (
    ModelClient,
    ModelRequest,
    ModelResponse,
    TokenUsage,
    estimate_tokens,
)
from subsessions.profiles.base import A2A_MODEL_PREFIX, A2A_TOKEN_MARK

if TYPE_CHECKING:
    import httpx
    from a2a.client import Client

log = logging.getLogger("subsessions")
A2A_EXTRA = "pip install 'subsessions[a2a]'"
CANCEL_SECONDS = 5.0  # how long a cancelled child waits for the agent to take `tasks/cancel`
_ENDED = {"completed", "failed", "canceled", "rejected", "input-required", "auth-required"}


def is_remote_model(model: str) -> bool:
    return model.startswith(A2A_MODEL_PREFIX)


def parse_remote_model(model: str) -> tuple[str, str | None]:
    """`a2a:URL[;token_env=NAME]` -> (URL, NAME or None)."""
    url, mark, token_env = model.removeprefix(A2A_MODEL_PREFIX).partition(A2A_TOKEN_MARK)
    return url, (token_env if mark else None)


class RemoteAgents:
    """Routes `a2a:` model ids to one `RemoteAgent` each, and every other id to `inner`.

    Engines built from settings have it inside their provider routes; a Python host wraps its
    own client: `Engine(model_client=RemoteAgents(client))`."""

    def __init__(self, inner: ModelClient | None = None) -> None:
        self.inner = inner
        self._agents: dict[str, RemoteAgent] = {}

    def __repr__(self) -> str:
        return f"<RemoteAgents {sorted(self._agents)} inner={self.inner!r}>"

    @property
    def provider(self) -> str:
        return str(getattr(self.inner, "provider", type(self.inner).__name__))

    async def respond(self, request: ModelRequest) -> ModelResponse:
        if not is_remote_model(request.model):
            if self.inner is None:
                raise ModelError(f"model {request.model}: no client for it")
            return await self.inner.respond(request)
        agent = self._agents.get(request.model)
        if agent is None:
            agent = self._agents[request.model] = RemoteAgent(*parse_remote_model(request.model))
        return await agent.respond(request)

    async def aclose(self) -> None:
        agents, self._agents = list(self._agents.values()), {}
        for agent in agents:
            await agent.aclose()
        closing = getattr(self.inner, "aclose", None)
        if closing is not None:
            await closing()


class RemoteAgent:
    """One agent's URL, its card (read once, when it first answers) and its HTTP client;
    the `contextId` of each child it talks to."""

    def __init__(self, url: str, token_env: str | None) -> None:
        self.url, self.token_env = url, token_env
        self._http: httpx.AsyncClient | None = None
        self._client: Client | None = None
        self._lock = asyncio.Lock()
        self._contexts: dict[str, str] = {}  # child session id -> the agent's contextId

    def __repr__(self) -> str:
        return f"<RemoteAgent {self.url} contexts={len(self._contexts)}>"

    async def respond(self, request: ModelRequest) -> ModelResponse:
        prompt = _new_input(request)
        client = await self._connect()
        exchange = _Exchange(self.url, self._contexts.get(request.session_id))
        # read in a task of its own: a cancel before the agent named its task still reads
        # on until it does, so the cancel can reach it
        reading = asyncio.ensure_future(exchange.run(client, prompt))
        try:
            await asyncio.shield(reading)
        except asyncio.CancelledError:
            await exchange.cancel(client, reading)
            raise
        except RemoteAgentError:
            raise
        except Exception as exc:  # the SDK's and httpx's errors: this child's one line
            raise RemoteAgentError(self.url, _one_line(exc)) from None
        finally:
            if exchange.context_id:
                self._contexts[request.session_id] = exchange.context_id
        answer = exchange.answer()
        usage = TokenUsage(estimate_tokens(len(prompt)), estimate_tokens(len(answer)),
                           estimated=True)
        return ModelResponse(output=(assistant_message(answer),), usage=usage,
                             model=request.model)

    async def _connect(self) -> Client:
        async with self._lock:
            if self._client is None:
                self._client = await self._open()
            return self._client

    async def _open(self) -> Client:
        try:
            import httpx
            from a2a.client import ClientConfig, ClientFactory
        except ImportError as exc:
            raise RemoteAgentError(self.url, f"the A2A SDK is missing ({exc.name}): "
                                   f"{A2A_EXTRA}") from None
        headers = {}
        if self.token_env is not None:
            token = os.environ.get(self.token_env)
            if not token:
                raise RemoteAgentError(self.url, f"{self.token_env} is not set (a2a_token_env)")
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30.0, read=None))
        try:
            factory = ClientFactory(ClientConfig(streaming=True, httpx_client=self._http))
            return await factory.create_from_url(self.url)
        except Exception as exc:
            http, self._http = self._http, None
            await http.aclose()
            raise RemoteAgentError(self.url, f"no usable agent card: {_one_line(exc)}") from None

    async def aclose(self) -> None:
        client, http = self._client, self._http
        self._client = self._http = None
        if client is not None:
            await client.close()
        if http is not None:
            await http.aclose()


class _Exchange:
    """One `message/send`: the task it opened and what the agent said, event by event."""

    def __init__(self, url: str, context_id: str | None) -> None:
        self.url = url
        self.context_id = context_id
        self.task_id: str | None = None
        self.state = "submitted"
        self.status_text = ""
        self.artifacts: dict[str, str] = {}
        self.message: str | None = None  # a direct reply (no task)
        self.known = asyncio.Event()  # set once the agent named its task

    async def run(self, client: Client, prompt: str) -> None:
        from a2a.helpers.proto_helpers import new_text_message
        from a2a.types import Role, SendMessageRequest

        message = new_text_message(prompt, context_id=self.context_id, role=Role.ROLE_USER)
        events: Any = client.send_message(SendMessageRequest(message=message))
        async with contextlib.aclosing(events):  # its HTTP stream closes with it, cancelled too
            async for event in events:
                self._take(event)
                if self.message is not None or self.state in _ENDED:
                    break

    def _take(self, event: Any) -> None:
        self._read(event)
        if self.task_id is not None:
            self.known.set()

    def _read(self, event: Any) -> None:
        from a2a.helpers.proto_helpers import get_artifact_text, get_message_text

        if event.HasField("message"):
            self.message = get_message_text(event.message)
            self.context_id = event.message.context_id or self.context_id
            return
        if event.HasField("task"):
            task = event.task
            self.task_id, self.context_id = task.id, task.context_id or self.context_id
            for artifact in task.artifacts:
                self.artifacts[artifact.artifact_id] = get_artifact_text(artifact)
            self._status(task.status)
        elif event.HasField("status_update"):
            update = event.status_update
            self.task_id = update.task_id or self.task_id
            self.context_id = update.context_id or self.context_id
            self._status(update.status)
        elif event.HasField("artifact_update"):
            update = event.artifact_update
            self.task_id = update.task_id or self.task_id
            text = get_artifact_text(update.artifact)
            key = update.artifact.artifact_id
            self.artifacts[key] = self.artifacts.get(key, "") + text if update.append else text

    def _status(self, status: Any) -> None:
        from a2a.helpers.proto_helpers import get_message_text
        from a2a.types import TaskState

        self.state = _state_word(TaskState.Name(status.state))
        if status.HasField("message"):
            self.status_text = get_message_text(status.message)

    def answer(self) -> str:
        """The agent's final text, or this child's failure."""
        if self.message is not None:
            return self.message
        if self.state == "completed":
            texts = [t for t in self.artifacts.values() if t]
            return "\n".join(texts) if texts else self.status_text
        if self.state == "input-required":
            raise RemoteAgentError(self.url, "input-required",
                                   question=self.status_text or "(no question given)")
        if self.state in ("failed", "rejected", "canceled", "auth-required"):
            said = f": {self.status_text}" if self.status_text else ""
            raise RemoteAgentError(self.url, f"task {self.task_id} {self.state}{said}")
        raise RemoteAgentError(self.url, f"the answer ended with task {self.task_id} still "
                               f"{self.state}")

    async def cancel(self, client: Client, reading: asyncio.Future[None]) -> None:
        """The child was cancelled: so is the agent's task (best effort, bounded)."""
        from a2a.types import CancelTaskRequest

        named = asyncio.ensure_future(self.known.wait())
        try:
            async with asyncio.timeout(CANCEL_SECONDS):
                await asyncio.wait((reading, named), return_when=asyncio.FIRST_COMPLETED)
                if self.task_id is not None and self.state not in _ENDED:
                    await client.cancel_task(CancelTaskRequest(id=self.task_id))
        except Exception as exc:  # a timeout or the agent's error: the child is cancelled anyway
            log.info("remote agent %s: tasks/cancel of %s failed: %s", self.url, self.task_id,
                     _one_line(exc))
        finally:
            named.cancel()
            reading.cancel()
            await asyncio.wait((reading, named))


def _state_word(name: str) -> str:
    """`TASK_STATE_INPUT_REQUIRED` -> `input-required` (the 0.3 words the docs use)."""
    return name.removeprefix("TASK_STATE_").lower().replace("_", "-")


def _new_input(request: ModelRequest) -> str:
    """What the child was told since its last answer (its first prompt, or a follow-up)."""
    texts: list[str] = []
    for item in reversed(request.items):
        if is_assistant_message(item):
            break
        if item.get("type", "message") == "message" and item.get("role") == "user":
            texts.append(message_text(item) or "")
    return "\n\n".join(reversed([t for t in texts if t]))


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]
