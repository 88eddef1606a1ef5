"""The agent card (`/.well-known/agent-card.json`): one skill per profile.

A message may name a skill (`metadata.skill`, the profile's name) to start its context as
that profile top-level; without one, a context is the default top-level session, which
spawns the profiles as children. The card offers JSON-RPC in A2A 1.0 and, on the same
URL, the SDK's 0.3 compatibility; with a token it declares the bearer scheme.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from subsessions._version import __version__
from subsessions.profiles import LoadedProfile

if TYPE_CHECKING:
    from a2a.types import AgentCard

BEARER = "bearer"
DESCRIPTION = ("Runs tasks as subsessions sessions that fan out into sub-sessions, one per "
               "profile (the skills), and answer with the final message.")


def agent_card(url: str, profiles: Mapping[str, LoadedProfile], *, auth: bool) -> AgentCard:
    from a2a.types import (
        AgentCapabilities,
        AgentCard,
        AgentInterface,
        AgentSkill,
        HTTPAuthSecurityScheme,
        SecurityRequirement,
        SecurityScheme,
        StringList,
    )
    from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_1_0, TransportProtocol

    skills = [AgentSkill(id=name, name=name, description=loaded.profile.description or name,
                         tags=["profile"], input_modes=["text/plain"],
                         output_modes=["text/plain"])
              for name, loaded in sorted(profiles.items())]
    card = AgentCard(
        name="subsessions", description=DESCRIPTION, version=__version__,
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding=TransportProtocol.JSONRPC,
                           protocol_version=version)
            for version in (PROTOCOL_VERSION_1_0, PROTOCOL_VERSION_0_3)],
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=skills,
    )
    if auth:
        card.security_schemes[BEARER].CopyFrom(SecurityScheme(
            http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer")))
        card.security_requirements.append(SecurityRequirement(schemes={BEARER: StringList()}))
    return card
