"""Typed results: a child spawned with an `output_schema` answers by calling
`submit_result` with arguments that validate against it; its result is then that JSON value.

Invalid arguments are answered with what is wrong (at most five errors, each with its path),
and the child tries again, `output_retries` times after its first try; a turn that ends
without the call is reminded once. `jsonschema` is imported only when a schema is given.
"""

from __future__ import annotations

from typing import Any

from attrs import define

from subsessions.config import SUBMIT_RESULT
from subsessions.errors import OutputMismatch

OUTPUT_RETRIES = 2  # after the first try: three tries in all
REMINDER = (f"You have not called {SUBMIT_RESULT}. Call it now with your result: it is how "
            "your answer is delivered.")
_SHOWN = 5  # validation errors shown to the model at once


def _wraps(schema: dict[str, Any]) -> bool:
    """A function's parameters are an object: any other schema is asked for as `result`."""
    return schema.get("type") != "object"


@define(eq=False)
class Typed:
    """One typed child's state: its schema, its tries, and what it submitted."""

    schema: dict[str, Any]
    retries: int = OUTPUT_RETRIES
    tries: int = 0
    reminded: bool = False
    value: Any = None
    submitted: bool = False
    first_error: str | None = None

    def spec(self) -> dict[str, Any]:
        parameters = self.schema if not _wraps(self.schema) else {
            "type": "object", "properties": {"result": self.schema}, "required": ["result"],
            "additionalProperties": False}
        return {"type": "function", "name": SUBMIT_RESULT, "parameters": parameters,
                "description": "Deliver your final result. Call it once you are done; "
                "its arguments must match the schema, or you are told what is wrong."}

    def submit(self, arguments: dict[str, Any]) -> str:
        """The `submit_result` call: accepted, or what is wrong (the task fails once the
        tries are spent: `settled`)."""
        from jsonschema import Draft202012Validator

        value = arguments.get("result") if _wraps(self.schema) else arguments
        errors = sorted(Draft202012Validator(self.schema).iter_errors(value),
                        key=lambda e: list(map(str, e.path)))
        self.tries += 1
        if not errors:
            self.value, self.submitted = value, True
            return "accepted"
        lines = [f"{'/'.join(map(str, e.path)) or '(the result)'}: {e.message}"
                 for e in errors[:_SHOWN]]
        if self.first_error is None:
            self.first_error = lines[0]
        if self.tries > self.retries:
            return "rejected: " + "; ".join(lines)
        return ("rejected; fix these and call submit_result again: " + "; ".join(lines))

    @property
    def spent(self) -> bool:
        """Its tries are used up without a valid result."""
        return not self.submitted and self.tries > self.retries

    def turn_ended(self) -> bool:
        """The model ended a turn without submitting: True to remind it (once); raises the
        second time."""
        if self.reminded:
            raise OutputMismatch("no submit_result call")
        self.reminded = True
        return True

    def failure(self) -> OutputMismatch:
        return OutputMismatch(self.first_error or "no submit_result call")
