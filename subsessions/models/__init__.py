"""Model clients behind one protocol."""

from subsessions.models.a2a_remote import RemoteAgents
from subsessions.models.base import ModelClient, ModelRequest, ModelResponse, TokenUsage
from subsessions.models.scripted import ScriptedModel

__all__ = ["ModelClient", "ModelRequest", "ModelResponse", "RemoteAgents", "ScriptedModel",
           "TokenUsage"]
