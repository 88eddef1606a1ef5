"""Tool schemas: checking arguments against the small JSON Schema subset our tools use,
and the Chat Completions form of a tool definition.

Supported: `type` (object, string, integer, number, boolean, array), `properties`,
`required`, `additionalProperties: false`, `enum`, `items`, `minLength`.
Anything else in a schema is ignored, never guessed at.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import orjson

from subsessions.errors import InvalidArguments


def parse_arguments(tool: str, raw: str) -> dict[str, Any]:
    """JSON text from the model to an argument object, or `InvalidArguments`."""
    try:
        value = orjson.loads(raw or "{}")
    except orjson.JSONDecodeError as exc:
        raise InvalidArguments(tool, f"arguments are not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise InvalidArguments(tool, f"arguments must be a JSON object, not {_kind(value)}")
    return value


def check_arguments(tool: str, schema: dict[str, Any], value: dict[str, Any]) -> None:
    problem = _problem(schema, value, "")
    if problem is not None:
        raise InvalidArguments(tool, problem)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _has_type(value: Any, wanted: str) -> bool:
    kind = _kind(value)
    if wanted == "integer" and kind == "number":
        return math.isfinite(value) and float(value).is_integer()
    if wanted == "number":
        return kind in ("integer", "number")
    return kind == wanted


def _problem(schema: dict[str, Any], value: Any, where: str) -> str | None:
    label = where or "arguments"
    wanted = schema.get("type")
    if isinstance(wanted, str) and not _has_type(value, wanted):
        article = "an" if wanted[0] in "aeiou" else "a"
        return f"{label} must be {article} {wanted}, not {_kind(value)}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{label} must be one of: {', '.join(map(str, schema['enum']))}"
    if isinstance(value, str) and len(value) < schema.get("minLength", 0):
        if schema["minLength"] == 1:
            return f"{label} must not be empty"
        return f"{label} must be at least {schema['minLength']} characters"
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, element in enumerate(value):
            problem = _problem(schema["items"], element, f"{label}[{index}]")
            if problem:
                return problem
    if isinstance(value, dict):
        return _object_problem(schema, value, where)
    return None


def _object_problem(schema: dict[str, Any], value: dict[str, Any], where: str) -> str | None:
    properties: dict[str, Any] = schema.get("properties", {})
    prefix = f"{where}." if where else ""
    for name in schema.get("required", ()):
        if name not in value:
            return f"missing required field {prefix}{name}"
    if schema.get("additionalProperties") is False:
        extra = sorted(set(value) - set(properties))
        if extra:
            return f"unexpected field {prefix}{extra[0]}"
    for name, sub in properties.items():
        if name in value:
            problem = _problem(sub, value[name], prefix + name)
            if problem:
                return problem
    return None


def to_chat_tool(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A Responses-format function definition in the Chat Completions format."""
    return {
        "type": "function",
        "function": {
            "name": spec["name"],
            "description": spec.get("description", ""),
            "parameters": spec.get("parameters", {}),
        },
    }


def fork_turns_of(value: object, tool: str) -> int | str | None:
    """`fork_turns` as given: None for an isolated child, "all", or N >= 1."""
    if value is None or value == "none":
        return None
    if value == "all" or (type(value) is int and value >= 1):
        return value
    raise InvalidArguments(tool, f'fork_turns: must be null, "none", "all" or an integer >= 1, '
                           f"not {value!r:.40}")


def check_output_schema(schema: object, tool: str) -> dict[str, Any] | None:
    """`output_schema` as given: None, or a JSON Schema object its metaschema
    accepts (`jsonschema` is imported only for one)."""
    if schema is None:
        return None
    if not isinstance(schema, dict):
        raise InvalidArguments(tool, f"output_schema: must be a JSON Schema object or null, "
                               f"not {type(schema).__name__}")
    from jsonschema import Draft202012Validator, SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        raise InvalidArguments(tool, f"output_schema: {exc.message}"
                               + (f" (at {where})" if where else "")) from None
    return schema
