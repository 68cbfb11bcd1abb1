"""An :class:`~deepcrew_episodic.EpisodicMemory`'s configuration: small frozen objects, each value
checked once, here, when the memory is built (see the memory's docstring for what each means).
The memory's collaborators take the whole :class:`Options` and read what they need of it.

Recall by meaning is one object (:class:`Embedding`: present only with an embedder), and so is
the lesson a model writes (:class:`Reflection`, which the write path takes whole).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta, tzinfo
from typing import Any

from ._embed import EMBEDDABLE_FIELDS, Embedder, as_embedder
from ._exceptions import ConfigurationError
from ._recall import RecallIndex
from ._redact import Redactor, as_redactor
from ._time import zone_given
from ._validate import boolean, integer, number, optional_number, positive_duration, strings

__all__ = ["Embedding", "Options", "Reflection", "relevance_floor"]


@dataclass(frozen=True, slots=True)
class Reflection:
    """The one-sentence lesson a model writes for each recorded episode (``reflect_model``)."""

    model: str | None
    timeout: float
    params: dict[str, Any]  # extra litellm arguments (a copy of those given)

    @classmethod
    def checked(
        cls, model: str | None, timeout: float, params: dict[str, Any] | None
    ) -> Reflection:
        if model is not None and (not isinstance(model, str) or not model):
            raise ConfigurationError(
                f"reflect_model must be a litellm model name or None, not {model!r}"
            )
        if params is not None and not isinstance(params, dict):
            raise ConfigurationError(
                f"reflect_params must be a dict of litellm arguments, not {type(params).__name__}"
            )
        timeout = number("reflect_timeout", timeout, minimum=0, exclusive_minimum=True)
        return cls(model, timeout, dict(params or {}))


@dataclass(frozen=True, slots=True)
class Embedding:
    """Recall by meaning: the embedder and how its similarities are read. A memory built
    without an embedder has none of this (``Options.embedding`` is ``None``)."""

    embedder: Embedder
    fields: tuple[str, ...]
    similarity_floor: float
    min_similarity: float | None
    timeout: float

    @classmethod
    def checked(
        cls,
        embedder: Embedder | Callable[..., Any] | None,
        fields: Sequence[str],
        similarity_floor: float,
        min_similarity: float | None,
        timeout: float,
    ) -> Embedding | None:
        """The embedding configuration, or ``None`` without an embedder (every value is
        checked either way: a wrong one is a mistake even while it is unused)."""
        found = as_embedder(embedder)
        names = strings("embed_fields", fields)
        if not names or set(names) - set(EMBEDDABLE_FIELDS) or len(set(names)) != len(names):
            raise ConfigurationError(
                f"embed_fields must name each of {EMBEDDABLE_FIELDS} at most once, not {names!r}"
            )
        floor = number("similarity_floor", similarity_floor)
        minimum = optional_number("min_similarity", min_similarity, minimum=-1.0, maximum=1.0)
        timeout = number("embed_timeout", timeout, minimum=0, exclusive_minimum=True)
        return None if found is None else cls(found, tuple(names), floor, minimum, timeout)


@dataclass(frozen=True, slots=True)
class Options:
    """Everything an :class:`~deepcrew_episodic.EpisodicMemory` is configured with, checked
    (the provider, the namespace and ``max_episodes`` belong to its log, and ``telemetry`` to
    its tracing)."""

    recall_k: int
    recall_fields: tuple[str, ...]
    max_age: timedelta | None
    half_life_days: float
    redactor: Redactor | None
    clock: Callable[[], float]
    tz: tzinfo | str  # as given: a zone name is loaded when a time first needs it
    reinforce: bool
    min_relevance: float
    reflection: Reflection
    embedding: Embedding | None  # None: keywords only

    @property
    def embedder(self) -> Embedder | Callable[..., Any] | None:
        """The embedder as it was given (``None``: keywords only)."""
        found = None if self.embedding is None else self.embedding.embedder
        return getattr(found, "original", found)

    @property
    def embedder_name(self) -> str | None:
        """The embedder's name as the memory records it in the log (read once)."""
        return None if self.embedding is None else self.embedding.embedder.name

    @classmethod
    def checked(
        cls,
        *,
        recall_k: int,
        reflect_model: str | None,
        reflect_timeout: float,
        reflect_params: dict[str, Any] | None,
        recall_fields: Sequence[str],
        max_age: timedelta | None,
        half_life_days: float,
        redact: bool | Redactor,
        clock: Callable[[], float],
        embedder: Embedder | Callable[..., Any] | None,
        embed_fields: Sequence[str],
        similarity_floor: float,
        min_similarity: float | None,
        min_relevance: float,
        embed_timeout: float,
        reinforce: bool,
        tz: str | tzinfo | None,
    ) -> Options:
        """The memory's keyword arguments checked, in the order of its signature (the first
        wrong one raises :class:`ConfigurationError`)."""
        recall_k = integer("recall_k", recall_k, minimum=1)
        if max_age is not None:
            max_age = positive_duration("max_age", max_age)
        half_life_days = number("half_life_days", half_life_days, minimum=0, exclusive_minimum=True)
        fields = strings("recall_fields", recall_fields)
        if len(set(fields)) != len(fields):
            raise ConfigurationError(f"recall_fields names a field twice: {fields!r}")
        try:
            RecallIndex(fields)  # the index's own check of the field names (nothing kept)
        except ValueError as exc:
            raise ConfigurationError(f"recall_fields: {exc}") from None
        reflection = Reflection.checked(reflect_model, reflect_timeout, reflect_params)
        redactor = as_redactor(redact)
        if not callable(clock):
            raise ConfigurationError(f"clock must be a callable returning seconds, not {clock!r}")
        # No I/O: a zone name is only checked here (a constructor may run on an event loop).
        zone = zone_given(tz)
        reinforce = boolean("reinforce", reinforce)
        embedding = Embedding.checked(
            embedder, embed_fields, similarity_floor, min_similarity, embed_timeout
        )
        return cls(
            recall_k=recall_k,
            recall_fields=tuple(fields),
            max_age=max_age,
            half_life_days=half_life_days,
            redactor=redactor,
            clock=clock,
            tz=zone,
            reinforce=reinforce,
            min_relevance=relevance_floor("min_relevance", min_relevance),
            reflection=reflection,
            embedding=embedding,
        )


def relevance_floor(name: str, value: Any) -> float:
    """A relevance floor (the memory's ``min_relevance``, or one recall's): from 0 to 1."""
    return number(name, value, minimum=0.0, maximum=1.0)
