"""Scripted models for tests of code built on subsessions, shipped once (as httpx ships
`MockTransport`): a `Script` answering every session of a tree by its prompt, a `Watch` of a
top-level session's events, builders of function calls, and readers of tool outputs and rollouts.

Children are held "running" by futures the test resolves, never by sleeping: a held prompt
waits on its gate inside the model call until the test answers it.
"""


from __future__ import annotations

import asyncio
import inspect
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from subsessions._core.session import Session
from subsessions.events import SessionEvent
from subsessions.ids import is_session_id
from subsessions.models.base import ModelRequest, ModelResponse
from subsessions.models.scripted import ScriptedModel
from subsessions.profiles import Profile
from subsessions.rollouts.reader import Rollout, find_rollout, read_rollout

__all__ = [
    "ENDINGS",
    "FOREVER_MS",
    "LIMIT_TEXT",
    "PARENT_PROMPT",
    "SUBSESSION_TOOLS",
    "TERMINAL",
    "WORKER",
    "Script",
    "Step",
    "Watch",
    "call",
    "cancel",
    "create",
    "events",
    "failure",
    "first_prompt",
    "meet_then_end_in_reverse",
    "outputs",
    "plain_ending",
    "prompt_of",
    "rollout_of",
    "spawn_held",
    "spawned",
    "terminals",
    "tokens",
    "value",
    "wait",
]

WORKER = Profile(name="worker", description="does work", developer_instructions="You are a worker.")
PARENT_PROMPT = "parent task"
FOREVER_MS = 3_600_000
TERMINAL = ("task_complete", "turn_aborted", "error")
ENDINGS = ("subagent.completed", "subagent.failed")
SUBSESSION_TOOLS = {
    "create_session", "wait_session", "cancel_session", "wait_sessions", "run_sessions",
    "list_profiles", "list_sessions", "send_message", "run_batch",
}
LIMIT_TEXT = (
    "sub-session limit reached (max_children={n}); wait for or cancel a running session first"
)


# -- what a model was shown ---------------------------------------------------------------
def prompt_of(request: ModelRequest) -> str:
    """The prompt of the task being run: the last user message."""
    users = [i for i in request.items if i.get("type") == "message" and i["role"] == "user"]
    return str(users[-1]["content"][0]["text"])


def first_prompt(request: ModelRequest) -> str:
    """The session's prompt: its first item, which must be the user's message."""
    first = request.items[0]
    assert first["role"] == "user"
    return str(first["content"][0]["text"])


def outputs(request: ModelRequest) -> list[dict[str, Any]]:
    """The tool outputs in a request's history (`function_call_output` items), in order."""
    return [item for item in request.items if item.get("type") == "function_call_output"]


# -- what a model answers -----------------------------------------------------------------
def call(
    name: str, arguments: Any = None, *, call_id: str | None = None, **kw: Any
) -> dict[str, Any]:
    """A function call; its arguments are `arguments` as given (any JSON or text) or `kw`."""
    item: dict[str, Any] = {
        "type": "function_call",
        "name": name,
        "arguments": kw if arguments is None else arguments,
    }
    if call_id is not None:
        item["call_id"] = call_id
    return item


def create(session_type: str, prompt: str, **kw: Any) -> dict[str, Any]:
    """A `create_session` call (`kw`: more arguments, such as `budget`)."""
    return call("create_session", session_type=session_type, prompt=prompt, **kw)


def wait(session_id: str, timeout_ms: int = FOREVER_MS, **kw: Any) -> dict[str, Any]:
    """A `wait_session` call (an hour by default: every wait is clamped to one)."""
    return call("wait_session", session_id=session_id, timeout_ms=timeout_ms, **kw)


def cancel(session_id: str, **kw: Any) -> dict[str, Any]:
    """A `cancel_session` call."""
    return call("cancel_session", session_id=session_id, **kw)


def tokens(input_tokens: int, output_tokens: int = 0) -> dict[str, Any]:
    """The usage a scripted response reports (an item of the response, not output)."""
    return {"type": "usage", "input_tokens": input_tokens, "output_tokens": output_tokens}


# -- what a tool returned -----------------------------------------------------------------
def value(output: dict[str, Any]) -> Any:
    """The JSON a successful tool output carries (asserts that it succeeded)."""
    assert output["success"] is True, output
    return orjson.loads(output["output"])


def failure(output: dict[str, Any]) -> str:
    """The error text of a failed tool output (asserts that it failed)."""
    assert output["success"] is False, output
    return str(output["output"])


def spawned(outs: Sequence[dict[str, Any]], n: int = 0) -> str:
    """The child id the `n`-th output (of a `create_session`) names."""
    session_id = value(outs[n])["session_id"]
    assert is_session_id(session_id)
    return str(session_id)


# -- the model ------------------------------------------------------------------------------
Step = Callable[[list[dict[str, Any]]], Any]


class Script:
    """The model of every session in a test, routed by the prompt `route` reads.

    A played prompt answers its n-th model call with `steps[n](outputs so far)` and
    `parent done` after the last step; a prompt with a handler is answered by it; a
    held prompt waits on its gate until the test answers it (or the call is
    cancelled); any other prompt is answered at once with `answer to {prompt}`.
    """

    def __init__(self, route: Callable[[ModelRequest], str] = prompt_of) -> None:
        self.model = ScriptedModel(self._respond)
        self.route = route
        self.handlers: dict[str, Callable[[ModelRequest], Any]] = {}
        self.seen: defaultdict[str, list[ModelRequest]] = defaultdict(list)
        self.cancelled: list[str] = []
        self._gates: dict[str, asyncio.Future[Any]] = {}
        self._started: dict[str, asyncio.Event] = {}

    def _event(self, prompt: str) -> asyncio.Event:
        return self._started.setdefault(prompt, asyncio.Event())

    def hold(self, *prompts: str) -> None:
        for prompt in prompts:
            self._gates[prompt] = asyncio.get_running_loop().create_future()

    def answer(self, prompt: str, response: Any) -> None:
        self._gates[prompt].set_result(response)

    def answer_soon(self, prompt: str, response: Any) -> None:
        """Answer once the current step is over (the parent is then inside its tool call)."""
        asyncio.get_running_loop().call_soon(self.answer, prompt, response)

    async def started(self, *prompts: str) -> None:
        for prompt in prompts:
            await asyncio.wait_for(self._event(prompt).wait(), 10)

    def play(self, prompt: str, steps: Sequence[Step]) -> None:
        async def respond(request: ModelRequest) -> Any:
            n = len(self.seen[prompt]) - 1
            if n >= len(steps):
                return ["parent done"]
            result = steps[n](outputs(request))
            return await result if inspect.isawaitable(result) else result

        self.handlers[prompt] = respond

    async def respond(self, request: ModelRequest) -> ModelResponse:
        """The model's answer, for a client that wraps this script."""
        return await self.model.respond(request)

    async def _respond(self, request: ModelRequest) -> Any:
        prompt = self.route(request)
        self.seen[prompt].append(request)
        self._event(prompt).set()
        handler = self.handlers.get(prompt)
        if handler is not None:
            result = handler(request)
            return await result if inspect.isawaitable(result) else result
        gate = self._gates.get(prompt)
        if gate is None:
            return [f"answer to {prompt}"]
        try:
            return await gate
        except asyncio.CancelledError:
            self.cancelled.append(prompt)
            raise


class Watch:
    """Every event of a top-level session (its descendants' are forwarded to it)."""

    def __init__(self) -> None:
        self.events: list[SessionEvent] = []
        self._ended: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)

    def __call__(self, event: SessionEvent) -> None:
        self.events.append(event)
        if event.type in ENDINGS:
            self._ended[event.data["remote_session_id"]].set()

    async def ended(self, *session_ids: str) -> None:
        for session_id in session_ids:
            await asyncio.wait_for(self._ended[session_id].wait(), 10)

    def endings(self, session_id: str | None = None) -> list[SessionEvent]:
        return [
            e
            for e in self.events
            if e.type in ENDINGS
            and (session_id is None or e.data["remote_session_id"] == session_id)
        ]

    def ending_order(self) -> list[str]:
        return [e.data["remote_session_id"] for e in self.endings()]


# -- children held running, or made to run together ------------------------------------------
async def spawn_held(parent: Session, script: Script, prompt: str) -> str:
    """A `worker` child of `parent` that is running: its model call is held until answered."""
    script.hold(prompt)
    cid = await parent.subsessions.spawn_child("worker", prompt)
    await script.started(prompt)
    return cid


def meet_then_end_in_reverse(script: Script, watch: Watch, prompts: Sequence[str]) -> None:
    """Handlers for `prompts`: each answers `{prompt} done`, but only once all of them are
    running at the same time, and in reverse order (each after the next one has ended)."""
    arrived = {p: asyncio.Event() for p in prompts}

    def child(me: str, after: str | None) -> Callable[[ModelRequest], Any]:
        async def respond(request: ModelRequest) -> Any:
            arrived[me].set()
            for other in prompts:  # only possible if all of them run at the same time
                await asyncio.wait_for(arrived[other].wait(), 10)
            if after is not None:  # end in reverse order
                await watch.ended(script.seen[after][0].session_id)
            return [f"{me} done"]

        return respond

    for me, after in zip(prompts, [*prompts[1:], None], strict=True):
        script.handlers[me] = child(me, after)


# -- the rollouts -----------------------------------------------------------------------------
def rollout_of(home: Path, session_id: str) -> Rollout:
    """The rollout of a session in `home`, read whole."""
    return read_rollout(find_rollout(home, session_id))


def events(rollout: Rollout) -> list[dict[str, Any]]:
    """The payloads of a rollout's `event_msg` lines, in order."""
    return [r["payload"] for r in rollout.records if r["type"] == "event_msg"]


_TURN_FIELDS = ("turn_id", "started_at", "completed_at", "duration_ms")


def plain_ending(event: dict[str, Any]) -> dict[str, Any]:
    """A terminal record as a test states it: without its turn id and times, and a cancel
    (Codex's `interrupted` with our `cancelled_by`) as `{"type": "turn_aborted", "reason":
    "cancelled"}`."""
    event = {k: v for k, v in event.items() if k not in _TURN_FIELDS}
    if event.get("type") == "turn_aborted" and event.pop("cancelled_by", None) is not None:
        event["reason"] = "cancelled"
    return event


def terminals(rollout: Rollout) -> list[dict[str, Any]]:
    """Each task's ending, plain (`plain_ending`); a failure is its `error` record (the
    `task_complete` carrying the error that follows it is the same ending)."""
    return [plain_ending(e) for e in events(rollout)
            if e["type"] in TERMINAL and not (e["type"] == "task_complete" and "error" in e)]
