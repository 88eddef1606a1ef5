"""Tool arguments: JSON parsing and the small JSON Schema checker."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from subsessions.errors import InvalidArguments
from subsessions.tools.schema import check_arguments, parse_arguments

TOOL = "wait_session"
PREFIX = f"invalid arguments for {TOOL}: "
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "session_type": {"type": "string", "enum": ["tester", "default"]},
        "prompt": {"type": "string", "minLength": 1},
        "timeout_ms": {"type": "integer"},
        "ratio": {"type": "number"},
        "flag": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "grid": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
    },
    "required": ["session_type", "prompt", "timeout_ms"],
    "additionalProperties": False,
}
GOOD: dict[str, Any] = {"session_type": "tester", "prompt": "hi", "timeout_ms": 5}


def problem(value: Any, schema: dict[str, Any] = SCHEMA) -> str:
    with pytest.raises(InvalidArguments) as caught:
        check_arguments(TOOL, schema, value)
    text = str(caught.value)
    assert text.startswith(PREFIX)
    assert caught.value.target == TOOL
    return text.removeprefix(PREFIX)


def test_parse_returns_the_object() -> None:
    assert parse_arguments(TOOL, '{"session_id": "a", "timeout_ms": 3}') == {
        "session_id": "a",
        "timeout_ms": 3,
    }


@pytest.mark.parametrize("raw", ["{", "not json", "{'a': 1}", "NaN", '{"a": 1e400}', "[" * 2000])
def test_parse_rejects_text_that_is_not_json(raw: str) -> None:
    with pytest.raises(InvalidArguments, match=f"^{PREFIX}arguments are not valid JSON"):
        parse_arguments(TOOL, raw)


@pytest.mark.parametrize(
    ("raw", "kind"),
    [
        ("[1, 2]", "array"),
        ('"text"', "string"),
        ("3", "integer"),
        ("2.5", "number"),
        ("null", "null"),
        ("true", "boolean"),
    ],
)
def test_parse_rejects_json_that_is_not_an_object(raw: str, kind: str) -> None:
    with pytest.raises(InvalidArguments) as caught:
        parse_arguments(TOOL, raw)
    assert str(caught.value) == f"{PREFIX}arguments must be a JSON object, not {kind}"


def test_valid_arguments_pass() -> None:
    check_arguments(TOOL, SCHEMA, GOOD)
    check_arguments(
        TOOL,
        SCHEMA,
        GOOD | {"ratio": 0.5, "flag": False, "tags": ["a", ""], "grid": [[1, 2], [], [3]]},
    )


def test_missing_field() -> None:
    value = dict(GOOD)
    del value["timeout_ms"]
    assert problem(value) == "missing required field timeout_ms"


def test_string_where_integer_is_wanted() -> None:
    assert problem(GOOD | {"timeout_ms": "5"}) == "timeout_ms must be an integer, not string"


def test_integer_where_string_is_wanted() -> None:
    assert problem(GOOD | {"prompt": 7}) == "prompt must be a string, not integer"


def test_bool_is_not_an_integer_nor_a_number() -> None:
    assert problem(GOOD | {"timeout_ms": True}) == "timeout_ms must be an integer, not boolean"
    assert problem(GOOD | {"ratio": False}) == "ratio must be a number, not boolean"


def test_integral_float_is_accepted_as_integer() -> None:
    check_arguments(TOOL, SCHEMA, GOOD | {"timeout_ms": 1.0})
    check_arguments(TOOL, SCHEMA, GOOD | {"timeout_ms": -0.0})


@pytest.mark.parametrize("bad", [1.5, -0.1, math.nan, math.inf, -math.inf])
def test_non_integral_or_non_finite_float_is_not_an_integer(bad: float) -> None:
    assert problem(GOOD | {"timeout_ms": bad}) == "timeout_ms must be an integer, not number"


def test_integer_is_a_number() -> None:
    check_arguments(TOOL, SCHEMA, GOOD | {"ratio": 3})


def test_null_is_not_a_string() -> None:
    assert problem(GOOD | {"prompt": None}) == "prompt must be a string, not null"


def test_extra_field_is_rejected() -> None:
    assert problem(GOOD | {"sneaky": 1}) == "unexpected field sneaky"


def test_extra_field_is_allowed_without_additional_properties_false() -> None:
    open_schema = {k: v for k, v in SCHEMA.items() if k != "additionalProperties"}
    check_arguments(TOOL, open_schema, GOOD | {"sneaky": 1})


def test_enum() -> None:
    assert (
        problem(GOOD | {"session_type": "hacker"}) == "session_type must be one of: tester, default"
    )


def test_array_items_are_checked() -> None:
    assert problem(GOOD | {"tags": "a"}) == "tags must be an array, not string"
    assert problem(GOOD | {"tags": ["a", 2]}) == "tags[1] must be a string, not integer"


def test_nested_array_items_are_checked() -> None:
    assert problem(GOOD | {"grid": [[1], [2, "x"]]}) == "grid[1][1] must be an integer, not string"
    assert problem(GOOD | {"grid": [[1], 2]}) == "grid[1] must be an array, not integer"


def test_empty_string_with_min_length() -> None:
    assert problem(GOOD | {"prompt": ""}) == "prompt must not be empty"


def test_empty_string_without_min_length_is_fine() -> None:
    check_arguments(TOOL, SCHEMA, GOOD | {"tags": [""]})


def test_nested_object_paths_are_dotted() -> None:
    schema = {
        "type": "object",
        "properties": {
            "opts": {
                "type": "object",
                "properties": {"n": {"type": "integer"}},
                "required": ["n"],
                "additionalProperties": False,
            }
        },
    }
    assert problem({"opts": {}}, schema) == "missing required field opts.n"
    assert problem({"opts": {"n": 1, "m": 2}}, schema) == "unexpected field opts.m"
    assert problem({"opts": {"n": "1"}}, schema) == "opts.n must be an integer, not string"


def test_top_level_value_must_be_an_object() -> None:
    assert problem([GOOD]) == "arguments must be an object, not array"


def test_parse_then_check_round_trip() -> None:
    raw = '{"session_type": "tester", "prompt": "go", "timeout_ms": 1.0, "extra": 1}'
    assert problem(parse_arguments(TOOL, raw)) == "unexpected field extra"


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
key_values = st.dictionaries(
    st.sampled_from([*SCHEMA["properties"], "other"]), json_values, max_size=8
)


near_good = st.fixed_dictionaries(
    {name: st.just(value) for name, value in GOOD.items()},
    optional={name: json_values for name in [*SCHEMA["properties"], "other"] if name not in GOOD},
)


@given(st.one_of(json_values, key_values, near_good))
def test_check_arguments_only_ever_raises_invalid_arguments(value: Any) -> None:
    try:
        check_arguments(TOOL, SCHEMA, value)
    except InvalidArguments as exc:
        assert str(exc).startswith(PREFIX)


@given(st.text())
def test_parse_arguments_only_ever_raises_invalid_arguments(raw: str) -> None:
    try:
        assert isinstance(parse_arguments(TOOL, raw), dict)
    except InvalidArguments as exc:
        assert str(exc).startswith(PREFIX)
