"""Model clients behind one protocol."""

from subsessions.models.base import ModelClient, ModelRequest, ModelResponse, TokenUsage
from subsessions.models.scripted import ScriptedModel

__all__ = ["ModelClient", "ModelRequest", "ModelResponse", "ScriptedModel", "TokenUsage"]
