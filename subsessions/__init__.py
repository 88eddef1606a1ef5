"""subsessions: spawn, drive, wait for and cancel LLM sub-sessions from profile presets."""

from subsessions._version import __version__
from subsessions.children import ChildInfo, ChildStatus, RunResult, WaitResult
from subsessions.config import Hooks, Invocation, SessionConfig, Tool
from subsessions.engine import Engine
from subsessions.environment import EnvPolicy
from subsessions.errors import (
    ChildCancelled,
    ChildFailed,
    ChildLimitReached,
    ChildNotFinished,
    ChildTimeout,
    ConfigError,
    DepthLimitReached,
    EngineClosed,
    InvalidArguments,
    InvalidHistory,
    MalformedStream,
    MaxTurnsExceeded,
    McpToolError,
    MissingApiKey,
    ModelError,
    ModelUnavailable,
    PermissionDenied,
    ProfileError,
    RolloutError,
    SessionBusy,
    SubsessionError,
    ToolNotSupported,
    UnknownSession,
    UnknownSessionType,
    UnsafeHome,
)
from subsessions.events import EventStream, SessionEvent
from subsessions.manager import SubsessionManager
from subsessions.models import ModelClient, ModelRequest, ModelResponse, ScriptedModel, TokenUsage
from subsessions.profiles import LoadedProfile, Profile, load_profiles
from subsessions.session import Session
from subsessions.tools import ToolContext
from subsessions.tools.errors import ToolError
from subsessions.usage import Usage

__all__ = [
    "ChildCancelled",
    "ChildFailed",
    "ChildInfo",
    "ChildLimitReached",
    "ChildNotFinished",
    "ChildStatus",
    "ChildTimeout",
    "ConfigError",
    "DepthLimitReached",
    "Engine",
    "EngineClosed",
    "EnvPolicy",
    "EventStream",
    "Hooks",
    "InvalidArguments",
    "InvalidHistory",
    "Invocation",
    "LoadedProfile",
    "MalformedStream",
    "MaxTurnsExceeded",
    "McpToolError",
    "MissingApiKey",
    "ModelClient",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "ModelUnavailable",
    "PermissionDenied",
    "Profile",
    "ProfileError",
    "RolloutError",
    "RunResult",
    "ScriptedModel",
    "Session",
    "SessionBusy",
    "SessionConfig",
    "SessionEvent",
    "SubsessionError",
    "SubsessionManager",
    "TokenUsage",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolNotSupported",
    "UnknownSession",
    "UnknownSessionType",
    "UnsafeHome",
    "Usage",
    "WaitResult",
    "__version__",
    "load_profiles",
]
