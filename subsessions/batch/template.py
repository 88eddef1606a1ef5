"""A batch's prompt template: `{column}` takes the item's field, `{{` and `}}` are braces.

Parsed once with the standard library's own format parser (`string.Formatter.parse`), but
rendered by plain lookup: `{a.b}` names the column `a.b`, never an attribute, and a
format spec or conversion is refused rather than half-supported.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import Any

import orjson
from attrs import frozen

from subsessions.errors import BatchError

_PARSER = string.Formatter()


class MissingField(Exception):
    """An item lacks a field the template names (the item fails; the batch goes on)."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(name)


@frozen
class Template:
    """Literal text and field names, alternating: `parts[0]`, `{fields[0]}`, `parts[1]`..."""

    text: str
    parts: tuple[str, ...]
    fields: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Template:
        if not isinstance(text, str) or not text.strip():
            raise BatchError("the prompt template is empty: say what each sub-session should do")
        parts: list[str] = []
        fields: list[str] = []
        try:
            pieces = list(_PARSER.parse(text))
        except ValueError as exc:
            raise BatchError(f"the prompt template is malformed ({exc}); write {{{{ and }}}} "
                             "for a literal brace") from None
        pending = ""
        for literal, name, spec, conversion in pieces:
            pending += literal
            if name is None:
                continue
            if not name.strip():
                raise BatchError("the prompt template has an empty {}; name a field inside "
                                 "it, or write {{ and }} for a literal brace")
            if spec or conversion:
                raise BatchError(f"the prompt template's {{{name}"
                                 f"{'!' + conversion if conversion else ''}"
                                 f"{':' + spec if spec else ''}}} has a format or conversion; "
                                 "only {field} is supported")
            parts.append(pending)
            fields.append(name)
            pending = ""
        parts.append(pending)
        return cls(text, tuple(parts), tuple(fields))

    def render(self, item: Mapping[str, Any]) -> str:
        """The prompt for one item; `MissingField` names the first field it lacks. A value
        that is not a string (JSONL) is written as JSON."""
        out = [self.parts[0]]
        for name, literal in zip(self.fields, self.parts[1:], strict=True):
            try:
                value = item[name]
            except KeyError:
                raise MissingField(name) from None
            out.append(value if isinstance(value, str) else orjson.dumps(value).decode())
            out.append(literal)
        return "".join(out)
