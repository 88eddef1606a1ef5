"""Our Responses-shaped items as Anthropic Messages blocks, and streamed blocks back as items.

No SDK import here: the request is plain JSON, and the answer is read from the SDK's event
objects by attribute. Thinking blocks travel in our `reasoning` items with their signature
in `encrypted_content` and `anthropic_block` naming the block type, so that they are sent
back unchanged (the API requires it during tool use); reasoning from other wires is not sent.
"""

from __future__ import annotations

from typing import Any

import orjson

from subsessions.errors import MalformedStream
from subsessions.items import Item, assistant_message, function_call, message_text
from subsessions.models.openai_common import required

Block = dict[str, Any]
EPHEMERAL = {"type": "ephemeral"}
THINKING_BLOCKS = ("thinking", "redacted_thinking")
DEFAULT_MAX_TOKENS = 8192
"""`max_tokens` when `model_max_output_tokens` is not set: the API requires one."""


def to_messages(items: tuple[Item, ...], tools: bool = True) -> list[dict[str, Any]]:
    """Our items as alternating user and assistant messages of blocks.

    A call without its output (a cancelled turn) and an output without its call are left
    out: the API refuses either. Tool results open their user message, as it requires.
    Without `tools` (none declared: the API then refuses tool blocks) calls and results are
    told as text."""
    calls = {item.get("call_id") for item in items if item.get("type") == "function_call"}
    outputs = {item.get("call_id") for item in items
               if item.get("type") == "function_call_output"}
    messages: list[dict[str, Any]] = []
    for item in items:
        kind = item.get("type")
        if kind == "message":
            text = message_text(item)
            if text:
                role = "assistant" if item.get("role") == "assistant" else "user"
                _add(messages, role, {"type": "text", "text": text})
        elif kind == "function_call":
            call_id = required(item, "call_id")
            if call_id in outputs:
                block: Block = {
                    "type": "tool_use", "id": call_id, "name": required(item, "name"),
                    "input": tool_input(required(item, "arguments"))}
                _add(messages, "assistant", block if tools else _told(block))
        elif kind == "function_call_output":
            call_id = required(item, "call_id")
            if call_id in calls:
                block = _tool_result(call_id, required(item, "output"),
                                     item.get("success") is False)
                _add(messages, "user", block if tools else _told(block))
        elif kind == "reasoning":
            thought = _thinking(item)
            if thought is not None:
                _add(messages, "assistant", thought)
    for message in messages:
        if message["role"] == "user":  # tool results first (a stable sort keeps the rest)
            message["content"].sort(key=lambda b: b["type"] != "tool_result")
    return messages


def _add(messages: list[dict[str, Any]], role: str, block: Block) -> None:
    if messages and messages[-1]["role"] == role:
        messages[-1]["content"].append(block)
    else:
        messages.append({"role": role, "content": [block]})


def _told(block: Block) -> Block:
    """A tool block as text, for a request that declares no tools."""
    if block["type"] == "tool_use":
        text = f"[called {block['name']} ({block['id']}): {orjson.dumps(block['input']).decode()}]"
    else:
        failed = " (failed)" if block.get("is_error") else ""
        text = f"[result of {block['tool_use_id']}{failed}: {block.get('content', '')}]"
    return {"type": "text", "text": text}


def tool_input(arguments: Any) -> dict[str, Any]:
    """A call's arguments as the object `tool_use.input` must be: text that is not a JSON
    object (a model's broken call, already answered as such) is sent as `{}`."""
    if isinstance(arguments, dict):
        return arguments
    try:
        value = orjson.loads(arguments)
    except (orjson.JSONDecodeError, TypeError):
        return {}
    return value if isinstance(value, dict) else {}


def _tool_result(call_id: str, output: Any, failed: bool) -> Block:
    text = output if isinstance(output, str) else orjson.dumps(output).decode()
    block: Block = {"type": "tool_result", "tool_use_id": call_id}
    if text:
        block["content"] = text
    if failed:
        block["is_error"] = True
    return block


def _thinking(item: Item) -> Block | None:
    kind, secret = item.get("anthropic_block"), item.get("encrypted_content")
    if not isinstance(secret, str):
        return None
    if kind == "thinking":
        text = "".join(str(s.get("text", "")) for s in item.get("summary") or ()
                       if isinstance(s, dict))
        return {"type": "thinking", "thinking": text, "signature": secret}
    if kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": secret}
    return None


def with_cache_marks(system: list[Block], tools: list[Block],
                     messages: list[dict[str, Any]]) -> None:
    """`cache_control` on the last tool, the system block and the newest message's last
    block (a thinking block cannot carry one: the one before it does)."""
    for blocks in (tools, system, messages[-1]["content"] if messages else []):
        for block in reversed(blocks):
            if block.get("type") not in THINKING_BLOCKS:
                block["cache_control"] = EPHEMERAL
                break


def mark_shared(messages: list[dict[str, Any]], shared: list[dict[str, Any]]) -> None:
    """A fourth breakpoint at the end of a fork's copied conversation (`shared`: those items
    alone as messages, which open `messages`): its instructions are its own, so it cannot
    read its parent's cache, but its forked siblings on the same profile read this prefix
    from the one the first of them wrote. (A message may merge the copy's last blocks with
    what follows: the mark goes on the copy's last block in it.)"""
    if not shared or len(shared) > len(messages):
        return
    blocks = messages[len(shared) - 1]["content"][:len(shared[-1]["content"])]
    for block in reversed(blocks):
        if block.get("type") not in THINKING_BLOCKS:
            block["cache_control"] = EPHEMERAL
            break


def may_think(messages: list[dict[str, Any]], choice: str, tools: list[Block]) -> bool:
    """Whether extended thinking can be asked for: the API refuses it with a forced tool
    choice, and in a tool loop whose assistant turn did not open with a thinking block (one
    that began forced, or before thinking was on)."""
    if tools and choice not in ("auto", "none"):
        return False
    for message in reversed(messages):
        if message["role"] == "assistant":
            blocks = message["content"]
            in_loop = any(b["type"] == "tool_use" for b in blocks)
            return not in_loop or blocks[0]["type"] in THINKING_BLOCKS
    return True


def to_tool(spec: dict[str, Any]) -> Block:
    """A Responses-format function definition as a Messages tool."""
    return {"name": spec["name"], "description": spec.get("description", ""),
            "input_schema": spec.get("parameters") or {"type": "object", "properties": {}}}


def to_tool_choice(choice: str) -> Block:
    """Ours (`auto`, `required`, `none`, a tool's name) in the Messages shape."""
    words = {"auto": "auto", "required": "any", "none": "none"}
    if choice in words:
        return {"type": words[choice]}
    return {"type": "tool", "name": choice}


class Blocks:
    """The content blocks of one answer as they stream in, by index."""

    __slots__ = ("by_index", "stopped")

    def __init__(self) -> None:
        self.by_index: dict[int, dict[str, Any]] = {}
        self.stopped: set[int] = set()

    def start(self, index: int, block: Any) -> None:
        kind = getattr(block, "type", None)
        entry: dict[str, Any] = {"type": kind, "parts": []}
        if kind == "text":
            entry["parts"].append(getattr(block, "text", "") or "")
        elif kind == "tool_use":
            entry["id"], entry["name"] = getattr(block, "id", None), getattr(block, "name", None)
            entry["input"] = getattr(block, "input", None)
        elif kind == "thinking":
            entry["parts"].append(getattr(block, "thinking", "") or "")
            entry["signature"] = getattr(block, "signature", "") or ""
        elif kind == "redacted_thinking":
            entry["signature"] = getattr(block, "data", "") or ""
        self.by_index[index] = entry

    def delta(self, index: int, delta: Any) -> None:
        entry = self.by_index.get(index)
        if entry is None:
            raise MalformedStream(f"content_block_delta for block {index}, never started")
        kind = getattr(delta, "type", None)
        if kind == "text_delta":
            entry["parts"].append(delta.text)
        elif kind == "input_json_delta":
            entry["parts"].append(delta.partial_json)
        elif kind == "thinking_delta":
            entry["parts"].append(delta.thinking)
        elif kind == "signature_delta":
            entry["signature"] = entry.get("signature", "") + delta.signature

    def stop(self, index: int) -> None:
        self.stopped.add(index)

    def complete_calls(self) -> int:
        return sum(1 for i, e in self.by_index.items()
                   if e["type"] == "tool_use" and i in self.stopped)

    def items(self, *, stopped_only: bool = False) -> tuple[Item, ...]:
        """Our items, in block order; consecutive text blocks make one message."""
        items: list[Item] = []
        text: list[str] = []
        for index in sorted(self.by_index):
            if stopped_only and index not in self.stopped:
                continue
            entry = self.by_index[index]
            if entry["type"] == "text":
                text.extend(entry["parts"])
                continue
            if text:
                items.append(assistant_message("".join(text)))
                text = []
            item = _item(entry)
            if item is not None:
                items.append(item)
        if text:
            items.append(assistant_message("".join(text)))
        return tuple(items)

    def text(self) -> str:
        return "".join("".join(e["parts"]) for e in self.by_index.values()
                       if e["type"] == "text")


def _item(entry: dict[str, Any]) -> Item | None:
    kind = entry["type"]
    if kind == "tool_use":
        name, call_id = entry.get("name"), entry.get("id")
        if not isinstance(name, str) or not name or not isinstance(call_id, str):
            raise MalformedStream(f"tool_use block without a name or an id: {entry!r:.200}")
        arguments = "".join(entry["parts"])
        if not arguments and isinstance(entry.get("input"), dict) and entry["input"]:
            arguments = orjson.dumps(entry["input"]).decode()  # sent whole, not streamed
        return function_call(name, arguments or "{}", call_id)
    if kind == "thinking":
        return {"type": "reasoning",
                "summary": [{"type": "summary_text", "text": "".join(entry["parts"])}],
                "encrypted_content": entry.get("signature", ""), "anthropic_block": kind}
    if kind == "redacted_thinking":
        return {"type": "reasoning", "summary": [],
                "encrypted_content": entry.get("signature", ""), "anthropic_block": kind}
    return None  # server tools' blocks and kinds we do not know


def whole_blocks(content: Any) -> Blocks:
    """A whole (not streamed) message's content as if streamed: every block complete."""
    blocks = Blocks()
    for index, block in enumerate(content or ()):
        blocks.start(index, block)
        blocks.stop(index)
    return blocks
