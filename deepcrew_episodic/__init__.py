"""deepcrew-episodic: episodic memory for LLM agents.

A durable, concurrency-safe log of an agent's past runs, recalled by relevance and recency
and rendered into the next run's context as a ``## Relevant past experience`` block::

    from deepcrew_episodic import EpisodicMemory, Episode
    from deepcrew_episodic.providers import FileMemoryProvider

Public names are loaded on first access (PEP 562), so ``import deepcrew_episodic`` costs
almost nothing. anyio loads with the providers that do I/O, pydantic with the runner (tool
schemas), and litellm only when a model is called.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._agent import Agent
    from ._distill import distill
    from ._embed import Embedder, LiteLLMEmbedder
    from ._episode import Episode, Outcome, outcome_for_score
    from ._events import EventType, StreamEvent, StreamPolicy
    from ._exceptions import (
        AgentError,
        ConfigurationError,
        CorruptDataError,
        DistillationError,
        EmbedderMismatchError,
        EmbeddingError,
        EpisodicMemoryError,
        FollowUpError,
        InvalidEpisodeError,
        MaxTurnsError,
        MissingDependencyError,
        StorageError,
        StorageTimeoutError,
        StorageUnavailableError,
        ToolError,
        VerifierError,
    )
    from ._followup import FollowUp, FollowUpModel, read_followup
    from ._grade import Grade
    from ._history import History
    from ._hook import EpisodicHook, Recalled, Recorded
    from ._listing import Page
    from ._log import Counters
    from ._memory import EpisodicMemory
    from ._recall import Ranking, Scored
    from ._redact import Redactor
    from ._result import AgentResult
    from ._runner import AgentStream, run_agent, stream_agent
    from ._stats import MemoryStats
    from ._sync_memory import SyncEpisodicMemory
    from ._telemetry import Telemetry
    from ._time import parse_time
    from ._verify import LLMVerifier, LoopConfig, Verdict, Verifier

__version__ = "0.1.0"

# A library logs and lets the application decide what to show: nothing is printed (not even a
# warning, through logging's last-resort handler) unless the application configures logging.
logging.getLogger("deepcrew_episodic").addHandler(logging.NullHandler())

# public name -> the private module that defines it
_EXPORTS: dict[str, str] = {
    "Agent": "._agent",
    "AgentError": "._exceptions",
    "AgentResult": "._result",
    "AgentStream": "._runner",
    "ConfigurationError": "._exceptions",
    "CorruptDataError": "._exceptions",
    "Counters": "._log",
    "DistillationError": "._exceptions",
    "EmbedderMismatchError": "._exceptions",
    "Embedder": "._embed",
    "EmbeddingError": "._exceptions",
    "Episode": "._episode",
    "EpisodicHook": "._hook",
    "EpisodicMemory": "._memory",
    "EpisodicMemoryError": "._exceptions",
    "EventType": "._events",
    "FollowUp": "._followup",
    "FollowUpError": "._exceptions",
    "FollowUpModel": "._followup",
    "Grade": "._grade",
    "History": "._history",
    "InvalidEpisodeError": "._exceptions",
    "LLMVerifier": "._verify",
    "LiteLLMEmbedder": "._embed",
    "LoopConfig": "._verify",
    "MaxTurnsError": "._exceptions",
    "MemoryStats": "._stats",
    "MissingDependencyError": "._exceptions",
    "Page": "._listing",
    "Outcome": "._episode",
    "outcome_for_score": "._episode",
    "parse_time": "._time",
    "distill": "._distill",
    "read_followup": "._followup",
    "Ranking": "._recall",
    "Recalled": "._hook",
    "Recorded": "._hook",
    "Redactor": "._redact",
    "Scored": "._recall",
    "StorageError": "._exceptions",
    "StorageTimeoutError": "._exceptions",
    "StorageUnavailableError": "._exceptions",
    "StreamEvent": "._events",
    "StreamPolicy": "._events",
    "SyncEpisodicMemory": "._sync_memory",
    "Telemetry": "._telemetry",
    "ToolError": "._exceptions",
    "Verdict": "._verify",
    "Verifier": "._verify",
    "VerifierError": "._exceptions",
    "run_agent": "._runner",
    "stream_agent": "._runner",
}

__all__ = [
    "Agent",
    "AgentError",
    "AgentResult",
    "AgentStream",
    "ConfigurationError",
    "CorruptDataError",
    "Counters",
    "DistillationError",
    "Embedder",
    "EmbedderMismatchError",
    "EmbeddingError",
    "Episode",
    "EpisodicHook",
    "EpisodicMemory",
    "EpisodicMemoryError",
    "EventType",
    "FollowUp",
    "FollowUpError",
    "FollowUpModel",
    "Grade",
    "History",
    "InvalidEpisodeError",
    "LLMVerifier",
    "LiteLLMEmbedder",
    "LoopConfig",
    "MaxTurnsError",
    "MemoryStats",
    "MissingDependencyError",
    "Outcome",
    "Page",
    "Ranking",
    "Recalled",
    "Recorded",
    "Redactor",
    "Scored",
    "StorageError",
    "StorageTimeoutError",
    "StorageUnavailableError",
    "StreamEvent",
    "StreamPolicy",
    "SyncEpisodicMemory",
    "Telemetry",
    "ToolError",
    "Verdict",
    "Verifier",
    "VerifierError",
    "__version__",
    "distill",
    "outcome_for_score",
    "parse_time",
    "read_followup",
    "run_agent",
    "stream_agent",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
