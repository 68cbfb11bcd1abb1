"""The exception tree. Every error this library raises on purpose is one of these.

    EpisodicMemoryError
     ├── ConfigurationError   (also ValueError)  a caller's mistake: bad namespace, bad limits
     ├── InvalidEpisodeError  (also ValueError)  invalid episode; nothing is written
     ├── StorageError                            the backend failed (I/O, redis unreachable, ...)
     │    └── CorruptDataError                   undecodable data, left untouched
     └── MissingDependencyError (also ImportError) an optional extra is not installed

Backend errors are translated in one place per provider and keep the original as ``__cause__``.
"""

from __future__ import annotations

__all__ = [
    "ConfigurationError",
    "CorruptDataError",
    "EpisodicMemoryError",
    "InvalidEpisodeError",
    "MissingDependencyError",
    "StorageError",
]


class EpisodicMemoryError(Exception):
    """Root of every error raised by deepcrew-episodic."""


class ConfigurationError(EpisodicMemoryError, ValueError):
    """An argument is invalid (for example a namespace that could reach other keys)."""


class InvalidEpisodeError(EpisodicMemoryError, ValueError):
    """An episode failed validation. The message names the offending field."""


class StorageError(EpisodicMemoryError):
    """The storage backend failed. The backend's own exception is the ``__cause__``."""


class CorruptDataError(StorageError):
    """Stored data cannot be decoded. The data is never overwritten or discarded."""


class MissingDependencyError(EpisodicMemoryError, ImportError):
    """An optional dependency is missing; the message gives the ``pip install`` command."""
