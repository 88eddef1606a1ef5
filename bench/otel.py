"""OpenTelemetry overhead on a fan-out: N children on a zero-latency scripted model
(DESIGN 3.12; targets in issue 29: tracing off costs nothing measurable, tracing on with a
batch span processor within 1.3x at N = 10,000).

In one process, rounds interleaved (A B C A B C ...), each round in a fresh directory, after a
warm-up (bench/fanout.py's machinery):
  off      no tracer provider: the baseline;
  on       `Engine(tracer_provider=...)`, an SDK provider with a `BatchSpanProcessor` whose
           exporter drops what it is given (what is timed is making the spans, not a network);
  content  the same with `capture_content=True` (prompts and answers as JSON attributes).
Then the extra-absent path, each run a fresh process, alternating: `absent` (OpenTelemetry
cannot be imported at all) against `present` (imported, no provider set); both run `off`.
Figures are per child, min / median / max over rounds; the median ratios last. Beside them,
what the SDK alone costs a child (its two spans made through the same provider, with and
without their attributes, one child after another): the least on/off the SDK allows.
With --breakdown, two more runs split `on` - `off`: the engine's side alone (OpenTelemetry's
no-op provider: the call sites, attributes and context, no span recorded) and the SDK's spans
with no processor; the batch processor's share is the rest.
Run: python bench/otel.py [--sizes 1000,10000] [--rounds 3] [--dir /dev/shm] [--breakdown]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
if "--absent" in sys.argv:  # before anything imports it: as if the extra were not installed
    sys.modules["opentelemetry"] = None  # type: ignore[assignment]

from fanout import (  # bench/, beside this file
    ANSWER,
    PROFILES,
    PROMPT,
    Run,
    _cpu_of_others,
    _fmt,
    _ratio,
)

from subsessions import Engine, ScriptedModel, SessionConfig


class Spans:
    """An SDK provider whose batch processor exports to nothing (and counts what it got)."""

    def __init__(self, n: int) -> None:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )

        spans = self

        class Drop(SpanExporter):
            def export(self, batch: Any) -> SpanExportResult:
                spans.exported += len(batch)
                return SpanExportResult.SUCCESS

        self.exported = 0
        self.provider = TracerProvider()
        # a queue that holds a whole run's spans: none is dropped, all are paid for
        self.provider.add_span_processor(BatchSpanProcessor(Drop(), max_queue_size=4 * n + 64))


async def subject(folder: Path, n: int, latency: float = 0.0, provider: Any = None,
                  content: bool = False) -> float:
    model = ScriptedModel(lambda request: [ANSWER], keep_requests=False)
    async with Engine(folder, model_client=model, profiles=PROFILES,
                      tracer_provider=provider, capture_content=content) as engine:
        assert (engine.runtime.tracer is None) == (provider is None)
        parent = await engine.create_session(SessionConfig(max_children=n + 1))
        manager = parent.subsessions
        start = time.perf_counter()
        ids = [await manager.spawn_child("mathematician", PROMPT) for _ in range(n)]
        results = list(await asyncio.gather(*(manager.wait_child(cid) for cid in ids)))
        elapsed = time.perf_counter() - start
    assert results == [ANSWER] * n
    return elapsed


async def rounds(base: Path, tag: str, runs: dict[str, Run], n: int,
                 count: int) -> dict[str, list[tuple[float, float]]]:
    """Each run once per round, the order rotating: (wall, CPU) seconds of each. CPU time is
    this process's (the batch processor's thread included): it drifts less than the wall
    when other processes load the machine."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    names = list(runs)
    for r in range(count):
        for name in names[r % len(names):] + names[:r % len(names)]:
            gc.collect()
            cpu = time.process_time()
            wall = await runs[name](base / f"{tag}-{name}-{r}", n, 0.0)
            times[name].append((wall, time.process_time() - cpu))
    return times


def _row(label: str, times: list[tuple[float, float]], n: int) -> str:
    cpu = statistics.median(c for _, c in times) / n * 1e6
    return f"  {label:34s} wall {_fmt([w for w, _ in times], n)}; CPU median {cpu:6.1f}"


def _ratios(times: dict[str, list[tuple[float, float]]], over: str, under: str) -> str:
    wall = [statistics.median(t[i] for t in times[name]) for i in (0, 1)
            for name in (over, under)]
    return f"wall {wall[0] / wall[1]:.3f}, CPU {wall[2] / wall[3]:.3f}"


async def in_process(base: Path, args: argparse.Namespace) -> None:
    for n in args.sizes:
        spans = Spans(n)
        runs: dict[str, Run] = {"off": subject, "on": partial(subject, provider=spans.provider),
                                "content": partial(subject, provider=spans.provider,
                                                   content=True)}
        if args.breakdown:
            runs.update(breakdown_runs())
        times = await rounds(base, f"n{n}", runs, n, args.rounds)
        spans.provider.force_flush()
        made = spans.exported / (2 * args.rounds * n)
        alone = [statistics.median(sdk_alone(spans.provider, n, with_attributes) for _ in range(3))
                 for with_attributes in (True, False)]
        spans.provider.shutdown()
        print(f"N={n}")
        print(_row("off (no provider):", times["off"], n))
        print(_row("on (batch processor):", times["on"], n))
        print(_row("on, capture_content=True:", times["content"], n))
        print(f"  spans exported per child: {made:.2f}")
        print(f"  ratio on/off {_ratios(times, 'on', 'off')} (target <= 1.3); "
              f"content/off {_ratios(times, 'content', 'off')}")
        off = statistics.median(c for _, c in times["off"])
        print(f"  the SDK alone, a child's two spans (CPU): {alone[0] / n * 1e6:.1f} µs with "
              f"their attributes, {alone[1] / n * 1e6:.1f} µs without; the least on/off it "
              f"allows: {(off + alone[0]) / off:.3f} (CPU, {(off + alone[1]) / off:.3f} "
              f"without attributes)")
        if args.breakdown:
            print_breakdown(times, n)


def breakdown_runs() -> dict[str, Run]:
    """`--breakdown`: what makes up `on` - the engine's side alone (an API tracer whose spans
    record nothing), and the SDK's spans without a processor to take them."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import NoOpTracerProvider

    return {"ours": partial(subject, provider=NoOpTracerProvider()),
            "sdk": partial(subject, provider=TracerProvider())}


def print_breakdown(times: dict[str, list[tuple[float, float]]], n: int) -> None:
    print(_row("engine side only (no-op spans):", times["ours"], n))
    print(_row("SDK spans, no processor:", times["sdk"], n))
    cpu = {name: statistics.median(c for _, c in times[name]) / n * 1e6
           for name in ("off", "ours", "sdk", "on")}
    print(f"  on - off, CPU a child: {cpu['on'] - cpu['off']:.1f} µs = engine side "
          f"{cpu['ours'] - cpu['off']:.1f} + SDK spans {cpu['sdk'] - cpu['ours']:.1f} + batch "
          f"processor {cpu['on'] - cpu['sdk']:.1f}")


def sdk_alone(provider: Any, n: int, attributes: bool) -> float:
    """CPU seconds the SDK takes for `n` children's spans, as the engine makes them: the
    task's `invoke_agent` span current while it runs (its token counts set at the end), its
    `chat` span made whole when the call returns; the same attributes (or none)."""
    from opentelemetry import context, trace
    from opentelemetry.trace import SpanKind

    tracer, sid = provider.get_tracer("subsessions"), "019ab2f1-0c4d-7e6f-8a9b-0c1d2e3f4a5b"
    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.id": sid,
             "gen_ai.conversation.id": sid, "gen_ai.request.model": "scripted",
             "gen_ai.agent.name": "mathematician", "subsessions.parent.id": sid}
    chat = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "scripted",
            "gen_ai.request.model": "scripted", "gen_ai.conversation.id": sid,
            "gen_ai.usage.input_tokens": 0, "gen_ai.usage.output_tokens": 0,
            "gen_ai.response.finish_reasons": ("stop",)}
    used = {"gen_ai.usage.input_tokens": 0, "gen_ai.usage.output_tokens": 0}
    gc.collect()
    cpu = time.process_time()
    for _ in range(n):
        span = tracer.start_span("invoke_agent mathematician", kind=SpanKind.INTERNAL,
                                 attributes=dict(agent) if attributes else None)
        token = context.attach(trace.set_span_in_context(span))
        tracer.start_span("chat scripted", kind=SpanKind.CLIENT, start_time=time.time_ns(),
                          attributes=dict(chat) if attributes else None).end()
        if attributes:
            span.set_attributes(dict(used))
        context.detach(token)
        span.end()
    provider.force_flush()
    return time.process_time() - cpu


def call_sites() -> None:
    """What tracing off adds to a child, timed alone: each call site's `tracer is None`
    test (three per child with one model call: its task's begin and end, the model call)."""
    host, loops = SimpleNamespace(runtime=SimpleNamespace(tracer=None)), 1_000_000
    start = time.perf_counter()
    for _ in range(loops):
        tracer = host.runtime.tracer
        if tracer is not None:
            raise AssertionError
    per_site = (time.perf_counter() - start) / loops
    start = time.perf_counter()
    for _ in range(loops):
        pass
    per_site -= (time.perf_counter() - start) / loops
    print(f"tracing off: {per_site * 1e9:.0f} ns a call site, {3 * per_site * 1e9:.0f} ns a "
          f"child with one model call")


def absent_path(base: Path, args: argparse.Namespace) -> None:
    n = args.absent_n
    times: dict[str, list[float]] = {"absent": [], "present": []}
    for r in range(args.absent_rounds):
        order = ("absent", "present") if r % 2 == 0 else ("present", "absent")
        for which in order:
            out = subprocess.run(
                [sys.executable, __file__, "--child", str(n), str(base / f"{which}-{r}"),
                 *(["--absent"] if which == "absent" else [])],
                check=True, capture_output=True, text=True).stdout.split()
            times[which].append(float(out[0]))
            assert out[1] == ("no-otel" if which == "absent" else "otel-imported"), out
    print(f"extra absent against present but unused, N={n}, a fresh process each run:")
    print(f"  absent (cannot be imported):       {_fmt(times['absent'], n)}")
    print(f"  present (imported, no provider):   {_fmt(times['present'], n)}")
    print(f"  ratio present/absent {_ratio(times, 'present', 'absent'):.3f} (target <= 1.02)")


def child(n: int, folder: Path) -> None:
    """One `off` run in this process (after a warm-up), printed with what was imported."""
    if "--absent" not in sys.argv:
        import opentelemetry.trace  # noqa: F401  (imported, as by a program that traces)

    async def both() -> float:
        await subject(folder.with_name(folder.name + "-warm"), 500)
        return await subject(folder, n)

    elapsed = asyncio.run(both())
    loaded = "otel-imported" if "opentelemetry.trace" in sys.modules else "no-otel"
    print(elapsed, loaded)


async def run(args: argparse.Namespace) -> None:
    base = Path(tempfile.mkdtemp(prefix="otel-bench-", dir=args.dir))
    print(f"otel: sizes {args.sizes}, rounds {args.rounds}, files under {base} "
          f"({'tmpfs' if str(base).startswith('/dev/shm') else 'disk'}), gc.freeze=no, "
          f"python {sys.version.split()[0]}")
    others_before = _cpu_of_others()
    try:
        await subject(base / "warm-off", 500)
        warm = Spans(500)
        await subject(base / "warm-on", 500, provider=warm.provider)
        warm.provider.shutdown()
        call_sites()
        await in_process(base, args)
        absent_path(base, args)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"peak RSS of this process {peak / 1024:.0f} MiB; other load during the run: "
          f"{_cpu_of_others() - others_before:.1f} CPU s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")],
                        default=[1_000, 10_000])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--absent-n", type=int, default=10_000)
    parser.add_argument("--absent-rounds", type=int, default=6)
    parser.add_argument("--breakdown", action="store_true",
                        help="also time the engine side alone and the SDK without a processor")
    parser.add_argument("--dir", default=None, help="where to write (default: the temp dir)")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--absent", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(int(args.child[0]), Path(args.child[1]))
        return
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
