"""The one-line prompt `m` opens: the message for the selected session (Esc gives up)."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class MessageScreen(ModalScreen[str | None]):
    """Answers the typed message (None on Esc or an empty line)."""

    CSS = """
    MessageScreen { align: center middle; }
    #ask { width: 80%; height: auto; border: round $accent; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "give_up", "cancel")]

    def __init__(self, short: str) -> None:
        super().__init__()
        self.short = short

    def compose(self) -> ComposeResult:
        with Vertical(id="ask"):
            yield Static(f"message for {self.short} (Enter sends, Esc gives up)", markup=False)
            yield Input(placeholder="steer it, or give an ended session its next task")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        self.dismiss(text or None)

    def action_give_up(self) -> None:
        self.dismiss(None)
