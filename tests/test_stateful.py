"""Random sequences of spawn / wait / cancel / abort / complete / fail / close against a manager.

Each example owns a fresh event loop; every rule runs one coroutine on it to
completion. Children wait on a gate (a future the machine resolves) inside their
model call, so "running" is a fact, not a timing accident. A model of what each
child's state must be is checked against the manager after every rule, and
against the rollouts and the event loop at the end.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from subsessions import (
    ChildCancelled,
    ChildFailed,
    ChildLimitReached,
    ChildNotFinished,
    ChildStatus,
    ChildTimeout,
    Engine,
    EngineClosed,
    ModelRequest,
    Profile,
    ScriptedModel,
    SessionConfig,
    UnknownSession,
)
from subsessions.ids import new_session_id
from subsessions.rollouts.reader import find_rollout, read_rollout

MAX_CHILDREN = 3
WORKER = Profile(name="worker", developer_instructions="work")

# expected states: ("running",), ("done", result), ("failed", error), ("cancelled",)
State = tuple[str, ...]
STATUS = {
    "running": ChildStatus.PENDING,
    "done": ChildStatus.DONE,
    "failed": ChildStatus.FAILED,
    "cancelled": ChildStatus.CANCELLED,
}


class ManagerMachine(RuleBasedStateMachine):
    children = Bundle("children")

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.tmp = tempfile.TemporaryDirectory(prefix="subsessions-stateful-")
        self.home = Path(self.tmp.name)
        self.gates: dict[str, asyncio.Future[Any]] = {}
        self.prompt_of: dict[str, str] = {}
        self.expected: dict[str, State] = {}
        self.counter = 0
        self.engine = Engine(
            self.home, model_client=ScriptedModel(self._respond), profiles={}, model="m"
        )
        self.parent = self.run(
            self.engine.create_session(
                SessionConfig(custom_agents=(WORKER,), max_children=MAX_CHILDREN)
            )
        )
        self.manager = self.parent.subsessions

    # -- plumbing ---------------------------------------------------------------------------
    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    async def _respond(self, request: ModelRequest) -> Any:
        prompt = request.items[0]["content"][0]["text"]
        return await self.gates[prompt]

    def running(self) -> list[str]:
        return [cid for cid, state in self.expected.items() if state[0] == "running"]

    def _check_wait_outcome(self, cid: str, outcome: Any) -> None:
        """`outcome` is what wait_child returned or raised for a child that has ended."""
        state = self.expected[cid]
        if state[0] == "done":
            assert outcome == state[1]
        elif state[0] == "failed":
            assert isinstance(outcome, ChildFailed), outcome
            assert outcome.error == state[1]
        else:
            assert isinstance(outcome, ChildCancelled), outcome

    async def _wait(self, cid: str, timeout: float | None) -> Any:
        try:
            return await self.manager.wait_child(cid, timeout=timeout)
        except (ChildFailed, ChildCancelled, ChildNotFinished, ChildTimeout) as exc:
            return exc

    # -- rules ------------------------------------------------------------------------------
    @initialize(target=children)
    def first_children(self) -> Any:
        return self.spawn(2)

    @rule(target=children, n=st.integers(1, 4))
    def spawn(self, n: int) -> Any:
        """Spawn `n` children one after the other (the limit may refuse some)."""
        spawned: list[str] = []
        for _ in range(n):
            self.counter += 1
            prompt = f"job {self.counter}"
            self.gates[prompt] = self.loop.create_future()
            try:
                cid = self.run(self.manager.spawn_child("worker", prompt))
            except ChildLimitReached:
                assert len(self.running()) >= MAX_CHILDREN
                continue
            except EngineClosed:
                assert self.engine.closed
                continue
            assert not self.engine.closed
            assert len(self.running()) < MAX_CHILDREN
            self.prompt_of[cid] = prompt
            self.expected[cid] = ("running",)
            spawned.append(cid)
        return multiple(*spawned)

    def _release(self, cid: str, ok: bool) -> Any:
        prompt = self.prompt_of[cid]
        response: Any = [f"result of {prompt}"] if ok else RuntimeError(f"failure of {prompt}")
        self.gates[prompt].set_result(response)
        return response

    @rule(cid=children, ok=st.booleans())
    def child_ends(self, cid: str, ok: bool) -> None:
        """The child's model answers (or raises); wait for it without a timeout."""
        if self.expected[cid][0] != "running":
            return
        self._release(cid, ok)
        outcome = self.run(self._wait(cid, None))
        prompt = self.prompt_of[cid]
        self.expected[cid] = (
            ("done", f"result of {prompt}") if ok else ("failed", f"failure of {prompt}")
        )
        self._check_wait_outcome(cid, outcome)

    @rule(cid=children, timeout=st.sampled_from([0, -1, 0.002]))
    def wait_briefly(self, cid: str, timeout: float) -> None:
        outcome = self.run(self._wait(cid, timeout))
        if self.expected[cid][0] == "running":
            wanted = ChildNotFinished if timeout <= 0 else ChildTimeout
            assert type(outcome) is wanted, outcome
            assert outcome.session_id == cid
        else:
            self._check_wait_outcome(cid, outcome)

    @rule(cid=children)
    def wait_forever_on_ended(self, cid: str) -> None:
        if self.expected[cid][0] == "running":
            return
        self._check_wait_outcome(cid, self.run(self._wait(cid, None)))

    @rule(cid=children)
    def cancel(self, cid: str) -> None:
        was_running = self.expected[cid][0] == "running"
        assert self.run(self.manager.cancel_child(cid)) is was_running
        if was_running:
            self.expected[cid] = ("cancelled",)

    @rule(cid=children, ok=st.booleans(), yields=st.sampled_from([0, 1, 2, 3, 6]))
    def cancel_as_it_ends(self, cid: str, ok: bool, yields: int) -> None:
        """Release the child and cancel it a few loop steps later: either outcome is fine,
        as long as cancel's answer and the final state agree."""
        if self.expected[cid][0] != "running":
            return

        async def race() -> bool:
            self._release(cid, ok)
            for _ in range(yields):
                await asyncio.sleep(0)
            return await self.manager.cancel_child(cid)

        cancelled = self.run(race())
        prompt = self.prompt_of[cid]
        if cancelled:
            self.expected[cid] = ("cancelled",)
        elif ok:
            self.expected[cid] = ("done", f"result of {prompt}")
        else:
            self.expected[cid] = ("failed", f"failure of {prompt}")

    @rule()
    def abort_all(self) -> None:
        self.run(self.manager.abort_all_children())
        for cid in self.running():
            self.expected[cid] = ("cancelled",)

    @rule()
    def wait_unknown(self) -> None:
        unknown = new_session_id()
        with pytest.raises(UnknownSession):
            self.run(self.manager.wait_child(unknown, timeout=0))
        with pytest.raises(UnknownSession):
            self.run(self.manager.cancel_child(unknown))

    @precondition(lambda self: not self.engine.closed)
    @rule(now=st.integers(0, 7))
    def close_engine(self, now: int) -> None:
        if now != 7:  # rarely: most sequences should run on an open engine for a while
            return
        self.run(self.engine.close())
        for cid in self.running():
            self.expected[cid] = ("cancelled",)
        self._check_no_leftovers()

    # -- checks -----------------------------------------------------------------------------
    @invariant()
    def states_agree(self) -> None:
        for cid, state in self.expected.items():
            assert self.manager.status(cid) is STATUS[state[0]], (cid, state)
            info = self.manager.info(cid)
            assert info.result == (state[1] if state[0] == "done" else None)
            assert info.error == (state[1] if state[0] == "failed" else None)
        assert sorted(self.manager.running()) == sorted(self.running())

    def _check_no_leftovers(self) -> None:
        assert [t for t in asyncio.all_tasks(self.loop) if not t.done()] == []
        assert not [t for t in threading.enumerate() if t.name == "rollout-writer"]

    def _check_rollouts(self) -> None:
        parent = read_rollout(find_rollout(self.home, self.parent.session_id))
        notes = [e.get("message", "") for e in parent.events("background_event")]
        for cid, state in self.expected.items():
            rollout = read_rollout(find_rollout(self.home, cid))
            ends = rollout.events("task_complete")
            ends += rollout.events("turn_aborted") + rollout.events("error")
            assert len(ends) == 1, (cid, state, ends)
            [end] = ends
            if state[0] == "done":
                assert end == {"type": "task_complete", "last_agent_message": state[1]}
                ending = f"child session {cid} completed"
            elif state[0] == "failed":
                assert end == {"type": "error", "message": state[1]}
                ending = f"child session {cid} failed: {state[1]}"
            else:
                assert end == {"type": "turn_aborted", "reason": "cancelled"}
                ending = f"child session {cid} cancelled"
            mentions = [n for n in notes if n.startswith(f"child session {cid} ")]
            assert mentions == [ending]
            assert sum(n.startswith(f"spawned child session {cid} ") for n in notes) == 1

    def teardown(self) -> None:
        try:
            if not self.engine.closed:
                self.run(self.engine.close())
                for cid in self.running():
                    self.expected[cid] = ("cancelled",)
            self.states_agree()
            self._check_no_leftovers()
            self._check_rollouts()
        finally:
            self.loop.close()
            self.tmp.cleanup()


def test_manager_state_machine() -> None:
    run_state_machine_as_test(
        ManagerMachine,
        settings=settings(
            max_examples=60,
            deadline=None,
            stateful_step_count=25,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
