"""Random sequences of spawn / wait / cancel / abort / complete / fail / close against a manager.

Each example owns a fresh event loop; every rule runs one coroutine on it to
completion. Children wait on a gate (a future the machine resolves) inside their
model call, so "running" is a fact, not a timing accident. A model of what each
child's state must be is checked against the manager after every rule, and
against the rollouts, the event stream and the event loop at the end.

Some children are nested: their model first spawns a grandchild (through the
`create_session` tool) and then waits on its own gate. Grandchildren are in the
same bundle as children and are waited for and cancelled through their own
parent's manager. The one-ending invariant is checked for every descendant:
exactly one `subagent.completed` / `subagent.failed` on the top-level session's
stream, exactly one terminal record in its rollout, exactly one ending
`background_event` in its parent's rollout.
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
    ChildInfo,
    ChildLimitReached,
    ChildNotFinished,
    ChildStatus,
    ChildTimeout,
    Engine,
    EngineClosed,
    ModelRequest,
    Profile,
    ScriptedModel,
    Session,
    SessionConfig,
    SubsessionManager,
    UnknownSession,
)
from subsessions.events import SessionEvent
from subsessions.ids import new_session_id
from subsessions.rollouts.reader import find_rollout, read_rollout
from subsessions.testing import terminals

MAX_CHILDREN = 4
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
        self.parent_of: dict[str, str | None] = {}  # None: a child of the top-level session
        self.nests: dict[str, str] = {}  # a nested child's prompt -> its grandchild's prompt
        self.at_gate: dict[str, asyncio.Event] = {}  # set once a prompt waits on its gate
        self.seen_events: list[SessionEvent] = []
        self.counter = 0
        self.engine = Engine(
            self.home, model_client=ScriptedModel(self._respond), profiles={}, model="m"
        )
        self.parent = self.run(
            self.engine.create_session(
                SessionConfig(custom_agents=(WORKER,), max_children=MAX_CHILDREN, max_queued=0)
            )
        )
        self.manager = self.parent.subsessions
        self.parent.on(self.seen_events.append)  # children's events are forwarded up

    # -- plumbing ---------------------------------------------------------------------------
    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    async def _respond(self, request: ModelRequest) -> Any:
        prompt = request.items[0]["content"][0]["text"]
        answered = any(i.get("type") == "function_call_output" for i in request.items)
        if prompt in self.nests and not answered:
            arguments = {"session_type": "worker", "prompt": self.nests[prompt]}
            return [{"type": "function_call", "name": "create_session", "arguments": arguments}]
        self.at_gate.setdefault(prompt, asyncio.Event()).set()
        return await self.gates[prompt]

    def running(self) -> list[str]:
        """Every running descendant: the child limit counts the whole tree."""
        return [cid for cid, state in self.expected.items() if state[0] == "running"]

    def session(self, cid: str) -> Session:
        [found] = [s for s in self.manager.tree() if s.session_id == cid]
        return found

    def owner(self, cid: str) -> SubsessionManager:
        """The manager of `cid`'s own parent."""
        parent = self.parent_of[cid]
        return self.manager if parent is None else self.session(parent).subsessions

    def _end_descendants(self, cid: str) -> None:
        """A child that ended (however it ended) has cancelled its running grandchildren."""
        for gid, parent in self.parent_of.items():
            if parent == cid and self.expected[gid][0] == "running":
                self.expected[gid] = ("cancelled",)

    def _new_gate(self, prompt: str) -> None:
        self.gates[prompt] = self.loop.create_future()

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
            return await self.owner(cid).wait_child(cid, timeout=timeout)
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
            self._new_gate(prompt)
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
            self.parent_of[cid] = None
            spawned.append(cid)
        return multiple(*spawned)

    @rule(target=children)
    def spawn_nested(self) -> Any:
        """Spawn a child whose model spawns a grandchild before it waits on its own gate."""
        self.counter += 1
        prompt, grand = f"nest {self.counter}", f"grand {self.counter}"
        self._new_gate(prompt)
        self._new_gate(grand)
        self.nests[prompt] = grand
        try:
            cid = self.run(self.manager.spawn_child("worker", prompt))
        except ChildLimitReached:
            assert len(self.running()) >= MAX_CHILDREN
            return multiple()
        except EngineClosed:
            assert self.engine.closed
            return multiple()
        assert len(self.running()) < MAX_CHILDREN
        self.prompt_of[cid] = prompt
        self.expected[cid] = ("running",)
        self.parent_of[cid] = None
        room = len(self.running()) < MAX_CHILDREN

        async def settle() -> None:  # the child has made its tool call and waits on its gate
            await asyncio.wait_for(self.at_gate.setdefault(prompt, asyncio.Event()).wait(), 10)

        self.run(settle())
        grandchildren = self.session(cid).subsessions.children()
        if not room:  # the tree was full: the child's create_session call was refused
            assert grandchildren == []
            return multiple(cid)
        [info] = grandchildren
        gid = info.session_id
        self.prompt_of[gid] = grand
        self.expected[gid] = ("running",)
        self.parent_of[gid] = cid
        return multiple(cid, gid)

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
        self._end_descendants(cid)
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
        assert self.run(self.owner(cid).cancel_child(cid)) is was_running
        if was_running:
            self.expected[cid] = ("cancelled",)
            self._end_descendants(cid)

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
            return await self.owner(cid).cancel_child(cid)

        cancelled = self.run(race())
        prompt = self.prompt_of[cid]
        if cancelled:
            self.expected[cid] = ("cancelled",)
        elif ok:
            self.expected[cid] = ("done", f"result of {prompt}")
        else:
            self.expected[cid] = ("failed", f"failure of {prompt}")
        self._end_descendants(cid)

    @rule(cids=st.lists(children, min_size=1, max_size=3), every=st.booleans())
    def wait_many(self, cids: list[str], every: bool) -> None:
        """wait_all / wait_any with a short timeout: the top-level manager knows its own
        children only (a grandchild id is unknown to it), and leaves the running ones be."""
        wait = self.manager.wait_all if every else self.manager.wait_any
        seen = self.run(wait(cids, 0.002))
        mine = [c for c in dict.fromkeys(cids) if self.parent_of[c] is None]
        assert list(seen.children) == mine
        assert seen.unknown == tuple(c for c in dict.fromkeys(cids) if c not in mine)
        ended = [c for c in mine if self.expected[c][0] != "running"]
        assert seen.timed_out is ((len(ended) < len(mine)) if every else (mine != [] and not ended))
        for c, info in seen.children.items():
            assert isinstance(info, ChildInfo)
            assert info.status is STATUS[self.expected[c][0]]

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
            owner = self.owner(cid)
            assert owner.status(cid) is STATUS[state[0]], (cid, state)
            info = owner.info(cid)
            assert info.result == (state[1] if state[0] == "done" else None)
            assert info.error == (state[1] if state[0] == "failed" else None)
        mine = [cid for cid in self.running() if self.parent_of[cid] is None]
        assert sorted(self.manager.running()) == sorted(mine)

    def _check_no_leftovers(self) -> None:
        assert [t for t in asyncio.all_tasks(self.loop) if not t.done()] == []
        assert not [t for t in threading.enumerate() if t.name == "rollout-writer"]

    def _notes(self, session_id: str) -> list[str]:
        rollout = read_rollout(find_rollout(self.home, session_id))
        return [e.get("message", "") for e in rollout.events("background_event")]

    def _check_rollouts(self) -> None:
        notes_of: dict[str | None, list[str]] = {None: self._notes(self.parent.session_id)}
        for cid, state in self.expected.items():
            parent = self.parent_of[cid]
            if parent not in notes_of:
                notes_of[parent] = self._notes(str(parent))
            notes = notes_of[parent]
            rollout = read_rollout(find_rollout(self.home, cid))
            ends = terminals(rollout)
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

    def _check_events(self) -> None:
        """Exactly one ending event per descendant, saying how it ended."""
        started: dict[str, int] = {}
        endings: dict[str, list[SessionEvent]] = {}
        for event in self.seen_events:
            if event.type == "subagent.started":
                rid = event.data["remote_session_id"]
                started[rid] = started.get(rid, 0) + 1
            elif event.type in ("subagent.completed", "subagent.failed"):
                endings.setdefault(event.data["remote_session_id"], []).append(event)
        assert started == dict.fromkeys(self.expected, 1)
        assert set(endings) == set(self.expected)
        for cid, state in self.expected.items():
            assert len(endings[cid]) == 1, (cid, state, endings[cid])
            [end] = endings[cid]
            if state[0] == "done":
                assert end.type == "subagent.completed"
                assert "error" not in end.data
                assert end.data.get("cancelled", False) is False
            elif state[0] == "failed":
                assert end.type == "subagent.failed"
                assert end.data["error"] == state[1]
                assert end.data["cancelled"] is False
            else:
                assert end.type == "subagent.failed"
                assert end.data["cancelled"] is True
            if self.parent_of[cid] is not None:  # forwarded from the child that spawned it
                assert end.data["parent_tool_call_id"] is not None

    def teardown(self) -> None:
        try:
            if not self.engine.closed:
                self.run(self.engine.close())
                for cid in self.running():
                    self.expected[cid] = ("cancelled",)
            self.states_agree()
            self._check_no_leftovers()
            self._check_rollouts()
            self._check_events()
        finally:
            self.loop.close()
            self.tmp.cleanup()


def run_machine(examples: int) -> None:
    run_state_machine_as_test(
        ManagerMachine,
        settings=settings(
            max_examples=examples,
            deadline=None,
            stateful_step_count=30,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


def test_manager_state_machine() -> None:
    run_machine(200)


@pytest.mark.slow
@pytest.mark.timeout(900)  # 1,000 examples: about a minute alone, several under load
def test_manager_state_machine_at_length() -> None:
    """`pytest -m slow tests/test_stateful.py` (CI runs it): 1,000 examples."""
    run_machine(1000)


@pytest.mark.parametrize("ok", [True, False], ids=["completes", "fails"])
def test_a_cancel_landing_while_a_child_ends_its_grandchild(ok: bool) -> None:
    """The sequence hypothesis found, pinned: a nested child answers (or fails) and, while
    it is still ending its running grandchild, its parent cancels it. The grandchild's
    ending must still be recorded, once, in the child's rollout."""
    machine = ManagerMachine()
    child, _grandchild = machine.spawn_nested().values
    machine.states_agree()
    machine.cancel_as_it_ends(child, ok, 2)
    machine.states_agree()
    machine.teardown()
