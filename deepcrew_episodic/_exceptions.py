"""The exception tree. Every error this library raises on purpose is one of these.

    EpisodicMemoryError
     ├── ConfigurationError   (also ValueError)  a caller's mistake: bad namespace, bad limits
     │    └── EmbedderMismatchError                the log's vectors were made by another embedder
     ├── InvalidEpisodeError  (also ValueError)  invalid episode; nothing is written
     ├── StorageError                            the backend failed (I/O, a server's error, ...)
     │    ├── StorageUnavailableError            the store unreachable, or the connection lost
     │    ├── StorageTimeoutError                a call ran out of time (no connection, a lock)
     │    └── CorruptDataError                   undecodable data, left untouched
     ├── MissingDependencyError (also ImportError) an optional extra is not installed
     ├── EmbeddingError                          an embedder failed or answered unusable vectors
     ├── DistillationError                       a distillation model failed or answered nonsense
     ├── FollowUpError                           a follow-up grader failed or answered no verdict
     └── AgentError                              a run of an agent failed (runner, loop)
          ├── MaxTurnsError                      no final answer within ``max_turns``
          ├── ToolError                          a tool crashed (``tool_errors="raise"``)
          └── VerifierError                      a verifier failed or gave no usable score

Backend errors are translated in one place per provider and keep the original as ``__cause__``.
A model error (a ``litellm`` exception) reaches the caller unchanged. Before any error of a run
leaves ``run_agent``, a ``failure`` episode naming it is recorded (when memory is set).
"""

from __future__ import annotations

__all__ = [
    "AgentError",
    "ConfigurationError",
    "CorruptDataError",
    "DistillationError",
    "EmbedderMismatchError",
    "EmbeddingError",
    "EpisodicMemoryError",
    "FollowUpError",
    "InvalidEpisodeError",
    "MaxTurnsError",
    "MissingDependencyError",
    "StorageError",
    "StorageTimeoutError",
    "StorageUnavailableError",
    "ToolError",
    "VerifierError",
]


class EpisodicMemoryError(Exception):
    """Root of every error raised by deepcrew-episodic."""


class ConfigurationError(EpisodicMemoryError, ValueError):
    """An argument is invalid (for example a namespace that could reach other keys)."""


class EmbedderMismatchError(ConfigurationError):
    """The log's vectors were written by another embedder (another model or dimension) than
    the memory's. ``memory.reembed()`` (or ``deepcrew-episodic reembed``) rebuilds them."""


class EmbeddingError(EpisodicMemoryError):
    """An embedder failed (error, timeout) or answered unusable vectors (wrong count or
    dimension, NaN, all zeros). ``record`` and ``recall`` tolerate it (logged and counted);
    ``backfill`` and ``reembed`` raise it. The embedder's own exception is the ``__cause__``."""


class DistillationError(EpisodicMemoryError):
    """The distillation model failed, timed out, or answered without the four lines (the
    message quotes the start of its reply). Nothing was made of the run."""


class FollowUpError(EpisodicMemoryError):
    """A follow-up grader (a grading model) failed, timed out, or answered without a usable
    verdict. The hook tolerates it: nothing is graded (logged, counted in
    ``memory.counters.grading_failures``), and the run goes on."""


class InvalidEpisodeError(EpisodicMemoryError, ValueError):
    """An episode failed validation. The message names the offending field."""


class StorageError(EpisodicMemoryError):
    """The storage backend failed. The backend's own exception is the ``__cause__``."""


class StorageUnavailableError(StorageError):
    """The store could not be reached, or the connection was lost during the call (a server
    down or restarting, a failover, a network cut). Worth retrying once the store is back. A
    write that failed this way changed nothing, or was applied whole if the connection was
    lost while it committed: never in part."""


class StorageTimeoutError(StorageError):
    """A call ran out of time: no free connection within the provider's ``timeout``, a
    statement cancelled at ``statement_timeout`` (PostgreSQL), no answer within the socket
    timeout (Redis), the database still locked by another writer after ``timeout`` (SQLite).
    A write that failed this way changed nothing, except on Redis, where a write the server
    received may still be applied after the client stopped waiting (whole, never in part)."""


class CorruptDataError(StorageError):
    """Stored data cannot be decoded. The data is never overwritten or discarded."""


class MissingDependencyError(EpisodicMemoryError, ImportError):
    """An optional dependency is missing; the message gives the ``pip install`` command."""


class AgentError(EpisodicMemoryError):
    """A run of an agent failed. ``run_agent`` recorded a ``failure`` episode first."""


class MaxTurnsError(AgentError):
    """The model was still calling tools after ``max_turns`` turns (deepcrew-ai's name)."""


class ToolError(AgentError):
    """A tool crashed and the agent was built with ``tool_errors="raise"`` (by default the
    error goes back to the model instead). The tool's own exception is the ``__cause__``."""

    def __init__(self, message: str, *, tool: str = "") -> None:
        super().__init__(message)
        self.tool = tool


class VerifierError(AgentError):
    """A refinement-loop verifier raised, or answered without a usable score."""
