"""The :class:`Episode` record: one past run of an agent."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import uuid
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ._exceptions import InvalidEpisodeError

__all__ = ["Episode", "Outcome"]

Outcome = Literal["success", "failure", "partial", "unknown"]
OUTCOMES: tuple[str, ...] = get_args(Outcome)
# Decoding never falls back to a default for these: the text of the run, its identity, and
# its retention deadline (a garbled deadline must hide the record, not keep it forever).
_STRICT_FIELDS = frozenset({"query", "id", "forget_after"})
log = logging.getLogger("deepcrew_episodic")


class Episode(BaseModel):
    """One recorded agent run.

    The fields are deepcrew-ai 0.6's, plus ``id`` (filled on record) and ``forget_after``
    (retention). JSON written by deepcrew-ai decodes unchanged.

    Example::

        Episode(query="Refund order 1182", response="Refunded.", outcome="success",
                score=0.9, tools_used=["refund"], tags=["billing"])
    """

    # Construction by a caller is strict about unknown fields (a typo must not vanish);
    # decoding stored JSON goes through :meth:`from_json`, which tolerates fields written
    # by a newer version.
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    query: str
    response: str = ""
    outcome: Outcome = "unknown"
    score: float | None = Field(default=None, strict=True, allow_inf_nan=False)
    tools_used: list[str] = Field(default_factory=list)
    reflection: str | None = None
    tags: list[str] = Field(default_factory=list)
    timestamp: str = ""
    agent_id: str = ""
    id: str = ""
    forget_after: str | None = None

    @field_validator("timestamp")
    @classmethod
    def _check_timestamp(cls, value: str) -> str:
        if value:
            parse_time(value)
        return value

    @field_validator("forget_after")
    @classmethod
    def _check_forget_after(cls, value: str | None) -> str | None:
        if value:
            parse_time(value)
        return value or None

    # --- conversion ---------------------------------------------------------------------

    def to_json(self) -> str:
        """Encode as compact JSON (the stored form; fields at their default are left out)."""
        return self.model_dump_json(exclude_defaults=True)

    @classmethod
    def from_json(cls, raw: str | bytes) -> Episode:
        """Decode a stored episode; unknown fields (from a newer writer) are ignored.

        Raises ``ValueError`` (``json.JSONDecodeError`` or ``pydantic.ValidationError``) when
        the record cannot be decoded at all.
        """
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError(f"episode record is a JSON {type(data).__name__}, not an object")
        known = {k: v for k, v in data.items() if k in cls.model_fields}
        try:
            return cls.model_validate(known)
        except ValidationError as exc:
            # One bad field (an outcome from a newer writer, a hand-edited score) should not
            # hide the whole run: fall back to that field's default. The fields that decide
            # what the record is, or whether it may be shown at all, stay strict.
            bad = {str(err["loc"][0]) for err in exc.errors() if err["loc"]}
            if not bad or bad & _STRICT_FIELDS:
                raise
            for name in bad:
                known.pop(name, None)
            episode = cls.model_validate(known)
            log.warning(
                "episode %s: unreadable %s replaced by the default (%s)",
                episode.id or "(no id)",
                ", ".join(sorted(bad)),
                str(exc).splitlines()[0],
            )
            return episode

    @classmethod
    def coerce(cls, episode: Any) -> Episode:
        """Accept our :class:`Episode`, a deepcrew-ai ``Episode`` dataclass, or a mapping."""
        if isinstance(episode, Episode):
            return episode
        if dataclasses.is_dataclass(episode) and not isinstance(episode, type):
            data: Any = dataclasses.asdict(episode)
        elif isinstance(episode, dict):
            data = episode
        else:
            raise InvalidEpisodeError(
                f"record() takes an Episode, a deepcrew Episode dataclass or a dict, "
                f"not {type(episode).__name__}"
            )
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise InvalidEpisodeError(_describe(exc)) from exc

    def day(self) -> str:
        """The episode's date as ``YYYY-MM-DD`` ("" when it has no timestamp)."""
        return self.timestamp[:10]

    def time(self) -> float | None:
        """The timestamp as a POSIX time, or ``None`` when unset."""
        return parse_time(self.timestamp) if self.timestamp else None


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "episode"
        parts.append(f"{where}: {err['msg']}")
    return "invalid episode: " + "; ".join(parts)


def new_id() -> str:
    return uuid.uuid4().hex


def now_iso(now: float | None = None) -> str:
    """ISO-8601 UTC with milliseconds and a ``Z`` suffix."""
    dt = datetime.fromtimestamp(now, UTC) if now is not None else datetime.now(UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def parse_time(value: str) -> float:
    """Parse an ISO-8601 time (``Z`` or an offset; naive means UTC) into POSIX seconds."""
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"not an ISO-8601 time: {value!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    ts = dt.timestamp()
    if not math.isfinite(ts):  # pragma: no cover - fromisoformat bounds years already
        raise ValueError(f"not a finite time: {value!r}")
    return ts
