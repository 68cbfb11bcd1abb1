"""deepcrew-episodic: episodic memory for LLM agents.

A durable, concurrency-safe log of an agent's past runs, recalled by relevance and recency
and rendered into the next run's context as a ``## Relevant past experience`` block::

    from deepcrew_episodic import EpisodicMemory, Episode
    from deepcrew_episodic.providers import FileMemoryProvider

Public names are loaded on first access (PEP 562), so ``import deepcrew_episodic`` costs
almost nothing and never imports litellm; pydantic and anyio load with the first name used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._episode import Episode, Outcome
    from ._exceptions import (
        ConfigurationError,
        CorruptDataError,
        EpisodicMemoryError,
        InvalidEpisodeError,
        MissingDependencyError,
        StorageError,
    )
    from ._log import Counters
    from ._memory import EpisodicMemory, MemoryStats
    from ._recall import Scored
    from ._redact import Redactor

__version__ = "0.1.0"

# public name -> the private module that defines it
_EXPORTS: dict[str, str] = {
    "ConfigurationError": "._exceptions",
    "CorruptDataError": "._exceptions",
    "Counters": "._log",
    "Episode": "._episode",
    "EpisodicMemory": "._memory",
    "EpisodicMemoryError": "._exceptions",
    "InvalidEpisodeError": "._exceptions",
    "MemoryStats": "._memory",
    "MissingDependencyError": "._exceptions",
    "Outcome": "._episode",
    "Redactor": "._redact",
    "Scored": "._recall",
    "StorageError": "._exceptions",
}

__all__ = [
    "ConfigurationError",
    "CorruptDataError",
    "Counters",
    "Episode",
    "EpisodicMemory",
    "EpisodicMemoryError",
    "InvalidEpisodeError",
    "MemoryStats",
    "MissingDependencyError",
    "Outcome",
    "Redactor",
    "Scored",
    "StorageError",
    "__version__",
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
