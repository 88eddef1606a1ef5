"""Typed batches (DESIGN 3.13): `run_batch(output_schema=...)` and `subsessions batch
--output-schema FILE`. Every item's child answers a value; JSONL lines carry it as `result`,
a CSV gets one column per top-level property (`result.{name}` where a column has the name)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import orjson
from fake_openai import FakeOpenAI, Recorded, Reply, call, calls, fake_openai, text
from openai_support import tool_outputs
from test_batch_cli import command, prompt, run

from subsessions import Engine, SessionConfig
from subsessions.testing import WORKER, Script, first_prompt

__all__ = ["fake_openai"]

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "score"],
          "properties": {"name": {"type": "string"}, "score": {"type": "integer"}}}


def _submit(request: Any) -> list[dict[str, Any]]:
    name = first_prompt(request).removeprefix("Rate ")
    return [{"type": "function_call", "name": "submit_result",
             "arguments": {"name": name.upper(), "score": len(name)}}]


async def test_a_typed_batch_writes_a_column_per_property(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "in.csv").write_text("name\nada\nbob\n")
    script = Script(route=lambda request: "all")
    script.handlers["all"] = _submit
    async with Engine(tmp_path / "home", model_client=script.model) as engine:
        parent = await engine.create_session(SessionConfig(custom_agents=(WORKER,),
                                                           cwd=str(work)))
        done = await parent.subsessions.run_batch(
            "worker", "in.csv", "Rate {name}", "out.csv", output_schema=SCHEMA)
        jsonl = await parent.subsessions.run_batch(
            "worker", "in.csv", "Rate {name}", "out.jsonl", output_schema=SCHEMA)
    assert (done.completed, jsonl.completed) == (2, 2)
    rows = list(csv.reader(io.StringIO((work / "out.csv").read_text())))
    assert rows[0] == ["name", "item", "status", "result", "error", "session_id", "usage",
                       "result.name", "score"]
    by_name = {row[0]: row for row in rows[1:]}
    assert by_name["ada"][7:] == ["ADA", "3"]
    assert json.loads(by_name["bob"][3]) == {"name": "BOB", "score": 3}
    results = [orjson.loads(line)["result"] for line in (work / "out.jsonl").read_bytes()
               .splitlines()]
    assert sorted(results, key=str) == [{"name": "ADA", "score": 3}, {"name": "BOB", "score": 3}]


def _typed_worker(request: Recorded) -> Reply:
    if not tool_outputs(request):
        return calls(call("submit_result", {"name": prompt(request), "score": 1}))
    return text("submitted")


async def test_batch_takes_an_output_schema_file(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "in.csv").write_text("city\nparis\nrome\n")
    (work / "schema.json").write_text(json.dumps(SCHEMA))
    fake_openai.script = _typed_worker
    code, _, err = await run(command(fake_openai, tmp_path / "home", "in.csv", "--profile",
                                       "default", "--prompt", "{city}", "--out", "out.jsonl",
                                       "--output-schema", "schema.json"), work)
    assert code == 0, err
    lines = [orjson.loads(line) for line in (work / "out.jsonl").read_bytes().splitlines()]
    assert sorted(line["result"]["name"] for line in lines) == ["paris", "rome"]


async def test_a_bad_output_schema_file_is_one_stderr_line(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "in.csv").write_text("city\nparis\n")
    cases = {"missing.json": None, "bad.json": "{not json", "list.json": "[1]",
             "wrong.json": '{"type": 3}'}
    for name, body in cases.items():
        if body is not None:
            (work / name).write_text(body)
    errors = []
    for name in cases:
        code, out, err = await run(command(fake_openai, tmp_path / "home", "in.csv",
                                           "--profile", "default", "--prompt", "{city}",
                                           "--out", "out.jsonl", "--output-schema", name), work)
        assert (code, out, err.count("\n")) == (1, "", 1), err
        errors.append(err)
    assert "--output-schema missing.json" in errors[0]
    assert "is not JSON" in errors[1]
    assert "holds no JSON Schema object" in errors[2]
    assert "output_schema: 3 is not valid" in errors[3]
    assert not fake_openai.requests and not (work / "out.jsonl").exists()
