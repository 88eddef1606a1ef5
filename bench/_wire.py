"""What the wire benchmarks share: the loopback fake OpenAI server answering one short text,
an engine on it in this process (the baseline), rounds alternating baseline and subject,
and the rows they print."""

from __future__ import annotations

import os
import resource
import statistics
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fake_openai import FakeOpenAI, text

from subsessions import Engine
from subsessions.models.factory import build_model_client
from subsessions.settings import load_settings, with_overrides

ANSWER = "A sub-session is a child conversation with its own history and rollout."


@asynccontextmanager
async def loopback(scratch: Path) -> AsyncIterator[tuple[FakeOpenAI, Engine]]:
    """The fake server (every answer `ANSWER`) and an engine in this process on it."""
    async with FakeOpenAI() as fake:
        fake.script = lambda _request: text(ANSWER)
        settings = with_overrides(load_settings(scratch / "api"), model="bench",
                                  base_url=fake.base_url)
        model = build_model_client(settings)
        try:
            async with Engine(scratch / "api", model_client=model, model="bench") as engine:
                yield fake, engine
        finally:
            await model.aclose()


async def alternate(fake: FakeOpenAI, rounds: int, per_round: int,
                    baseline: Callable[[list[str]], Awaitable[float]],
                    subject: Callable[[list[str]], Awaitable[float]],
                    ) -> tuple[list[float], list[float]]:
    """Rounds of `per_round` prompts, A B A B: each side's seconds per round."""
    base_times: list[float] = []
    subject_times: list[float] = []
    for r in range(rounds):
        prompts = [f"prompt {r}.{i}" for i in range(per_round)]
        fake.requests.clear()
        base_times.append(await baseline(prompts))
        fake.requests.clear()
        subject_times.append(await subject(prompts))
    return base_times, subject_times


def median_ratio(subject: list[float], base: list[float]) -> float:
    return statistics.median(s / a for s, a in zip(subject, base, strict=True))


def fmt(values: list[float], n: int) -> str:
    """min / median / max of µs per call."""
    per = sorted(v / n * 1e6 for v in values)
    return f"{per[0]:9.0f} {statistics.median(per):9.0f} {per[-1]:9.0f}"


def footer(scratch: Path) -> None:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"bench process peak RSS {peak / 1024:.0f} MiB; rollouts on disk in {scratch} "
          f"(filesystem of {tempfile.gettempdir()}); gc.freeze not used; "
          f"load: {os.getloadavg()[0]:.2f}")
