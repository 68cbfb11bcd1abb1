"""The :class:`Episode` record: one past run of an agent."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, get_args

from ._exceptions import InvalidEpisodeError
from ._redact import register_text_fields
from ._source import (
    SOURCES,
    OutcomeSource,
    check_source,
    is_verified,
    outcome_words,
    source_label,
    source_of,
)
from ._unicode import is_hidden
from ._validate import shown

__all__ = ["Episode", "Outcome", "outcome_for_score"]

Outcome = Literal["success", "failure", "partial", "unknown", "claimed_success", "abandoned"]
OUTCOMES: tuple[str, ...] = get_args(Outcome)
# Checked by something outside the agent: a test, an exit code, a verifier, the user.
VERIFIED: frozenset[str] = frozenset({"success", "failure"})
# The one rule for a score given without an outcome (API, hook, runner, CLI, grades).
SUCCESS_SCORE = 0.7
FAILURE_SCORE = 0.3


def outcome_for_score(
    score: float, *, success: float = SUCCESS_SCORE, failure: float = FAILURE_SCORE
) -> Outcome:
    """The outcome a score in [0, 1] stands for when no outcome is given: ``success`` at or
    above *success* (0.7), ``failure`` below *failure* (0.3), ``partial`` between.

    >>> outcome_for_score(0.9), outcome_for_score(0.5), outcome_for_score(0.1)
    ('success', 'partial', 'failure')
    """
    if score >= success:
        return "success"
    if score < failure:
        return "failure"
    return "partial"


def score_fits(outcome: str, score: float) -> bool:
    """Whether a grade's *score* says what its *outcome* says, by the one rule of
    :func:`outcome_for_score`: a (claimed) success at 0.7 or more, a partial between 0.3 and
    0.7, a failure below 0.3. ``unknown`` and ``abandoned`` say nothing a score could match."""
    said = "success" if outcome == "claimed_success" else outcome
    return said in ("success", "partial", "failure") and outcome_for_score(score) == said


def score_contradicts(outcome: str, score: float | None) -> bool:
    """Whether a recorded *score* says the opposite of its *outcome*: a success (claimed or
    verified) scored below 0.3, or a failure scored 0.7 or more (a deepcrew-ai log, an old
    store or another tool may hold such a pair). Such a score is never shown: the outcome is.
    A partial, or a score a loop with its own thresholds placed, is not a contradiction."""
    if score is None:
        return False
    if outcome in ("success", "claimed_success"):
        return outcome_for_score(score) == "failure"
    if outcome == "failure":
        return outcome_for_score(score) == "success"
    return False


# Decoding never falls back to a default for these: the text of the run, its identity, and
# its retention deadline (a garbled deadline must hide the record, not keep it forever).
_STRICT_FIELDS = frozenset({"query", "id", "forget_after"})
log = logging.getLogger("deepcrew_episodic")
ID_CHARS = 128


class _Invalid(Exception):
    """A field's value is unacceptable; *where* is the path inside the field (a list index)."""

    def __init__(self, message: str, where: str = "") -> None:
        super().__init__(message)
        self.message, self.where = message, where


# A plain dataclass, validated by hand, rather than a pydantic model: pydantic costs a quarter
# of a second to import, and the command line's `recall` must start in a fraction of that.
# It also keeps deepcrew-ai's shape: a dataclass with the same fields in the same order.
@dataclass(slots=True, weakref_slot=True)
class Episode:
    """One recorded agent run.

    The fields are deepcrew-ai 0.6's, in its order, plus ``id`` (filled on record),
    ``forget_after`` (retention), ``approach`` (how the agent went about it, from a distilled
    run), ``transcript_ref`` (where the raw transcript lives), ``run_id`` (the iterations of
    one run or refinement loop share it), ``outcome_source`` (who said the outcome: a
    verifier, the user, the agent, a model judge, or ``""``), ``phase`` (a long run's subtask:
    the episodes of one run with different phases are different subtasks, recalled apart; see
    :func:`run_key`) and ``conversation_id`` (the chat the run answered in, by which a
    follow-up finds the run it grades). ``score`` is in [0, 1]; recorded without an outcome
    (``unknown``), a score stands for one (:func:`outcome_for_score`). Every field is checked
    on construction and on assignment:
    a wrong value raises :class:`~deepcrew_episodic.InvalidEpisodeError` (a ``ValueError``)
    naming the field. JSON written by deepcrew-ai decodes unchanged.

    Example::

        Episode(query="Refund order 1182", response="Refunded.", outcome="success",
                score=0.9, tools_used=["refund"], tags=["billing"])
    """

    query: str
    response: str = ""
    outcome: Outcome = "unknown"
    score: float | None = None
    tools_used: list[str] = field(default_factory=list)
    reflection: str | None = None
    tags: list[str] = field(default_factory=list)
    timestamp: str = ""
    agent_id: str = ""
    id: str = ""
    forget_after: str | None = None
    approach: str = ""
    transcript_ref: str | None = None
    run_id: str = ""
    # A label, not text (a search or a redactor does not look in it). A value another tool
    # wrote and this version does not know is kept as it was stored (see _source.py).
    outcome_source: OutcomeSource = ""
    """Where the outcome came from: ``"verifier"`` (a test, an exit code, a verifier),
    ``"user"``, ``"agent"`` (its own claim) or ``"judge"`` (a model judging the run); ``""``
    when nothing was recorded (see docs/recall.md#outcome-sources)."""
    phase: str = ""
    conversation_id: str = ""

    @property
    def verified(self) -> bool:
        """Whether the outcome was checked outside the agent: a ``success`` or ``failure`` from
        a verifier or the user (or from no recorded source, as older records read)."""
        return is_verified(self.outcome, self.outcome_source)

    @property
    def effective_source(self) -> str:
        """The source the outcome is read as coming from: ``outcome_source`` when this
        library knows it, ``"agent"`` for a ``claimed_success`` without one, ``""`` for an
        ``unknown`` outcome, no recorded source, or one this version does not know."""
        return source_of(self.outcome, self.outcome_source)

    def source_label(self) -> str:
        """What a listing shows beside the outcome: :attr:`effective_source`, or a stored
        source this version does not know, marked ``"<value>: unknown source"``."""
        return source_label(self.outcome, self.outcome_source)

    def outcome_text(self) -> str:
        """The outcome in words, with who says so, as the prompt block shows it: ``worked
        (verified by a check)``, ``claimed to work (unverified)``, ``failed (reported by the
        user)``, ``a model judged it worked (unverified)``, ``outcome unknown``."""
        return outcome_words(self.outcome, self.outcome_source)

    if not TYPE_CHECKING:  # hidden from type checkers, which then still catch typos

        def __setattr__(self, name: str, value: Any) -> None:
            # The generated __init__ assigns every field, so this checks construction too.
            check = _CHECKS.get(name)
            if check is not None:
                value = _checked(name, check, value)
            object.__setattr__(self, name, value)

    # --- conversion ---------------------------------------------------------------------

    def copy(self) -> Episode:
        """An independent copy: its lists are new lists."""
        return Episode._trusted({name: _copy(getattr(self, name)) for name in FIELDS})

    def to_dict(self) -> dict[str, Any]:
        """Every field, as JSON-compatible values (the lists are copies)."""
        return {name: _copy(getattr(self, name)) for name in FIELDS}

    def to_json(self) -> str:
        """Encode as compact JSON (the stored form; fields at their default are left out)."""
        data: dict[str, Any] = {"query": self.query}
        for name, default in _DEFAULTS.items():
            value = getattr(self, name)
            if value != default:
                data[name] = value
        return _encode(data)

    @classmethod
    def from_json(cls, raw: str | bytes) -> Episode:
        """Decode a stored episode; unknown fields (from a newer writer) are ignored.

        A field that holds a wrong value (an outcome from a newer writer, a hand-edited
        score) falls back to its default, with a warning, so one bad field does not hide the
        whole run. Raises ``ValueError`` when the record is not JSON, not an object, or has
        no valid ``query``, ``id`` or ``forget_after``: those decide what the record is and
        whether it may be shown at all.
        """
        try:
            data = json.loads(raw)
        except RecursionError:
            raise ValueError("episode record is nested too deeply to decode") from None
        if not isinstance(data, dict):
            raise ValueError(f"episode record is a JSON {type(data).__name__}, not an object")
        values: dict[str, Any] = {}
        bad: list[str] = []
        for name, check in _DECODE_CHECKS.items():
            if name not in data:
                continue
            try:
                values[name] = _checked(name, check, data[name])
            except InvalidEpisodeError as exc:
                if name in _STRICT_FIELDS:
                    raise
                bad.append(f"{name} ({exc})")
        if "query" not in values:
            raise InvalidEpisodeError("invalid episode: query: field required")
        episode = cls._trusted(values)
        if bad:
            log.warning(
                "episode %s: unreadable %s replaced by the default",
                episode.id or "(no id)",
                "; ".join(bad),
            )
        return episode

    @classmethod
    def _trusted(cls, values: dict[str, Any]) -> Episode:
        # Values already checked: skip a second round of checks (decoding 100,000 stored
        # episodes is the cost of a cold recall).
        episode = object.__new__(cls)
        for name in FIELDS:
            value = values[name] if name in values else _copy(_DEFAULTS[name])
            object.__setattr__(episode, name, value)
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
        unknown = sorted(str(k) for k in data if k not in _CHECKS)
        if unknown:
            raise InvalidEpisodeError(
                f"invalid episode: unknown field{'s' * (len(unknown) > 1)} "
                f"{', '.join(map(repr, unknown))} (the fields are {', '.join(FIELDS)})"
            )
        if "query" not in data:
            raise InvalidEpisodeError("invalid episode: query: field required")
        return cls(**data)

    def day(self) -> str:
        """The episode's date as ``YYYY-MM-DD`` ("" when it has no timestamp)."""
        return self.timestamp[:10]

    def time(self) -> float | None:
        """The timestamp as a POSIX time, or ``None`` when unset."""
        return parse_time(self.timestamp) if self.timestamp else None


# --- field checks ---------------------------------------------------------------------------


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise _Invalid(f"expected a string, not {_kind(value)}")
    if not value.isascii():
        _check_encodable(value)
    return value


def _check_encodable(value: str) -> None:
    # A lone surrogate (what Python makes of a non-UTF-8 byte on a command line) could be
    # stored, but every later reader writing it to a UTF-8 stream would fail.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _Invalid(
            f"text is not valid Unicode ({exc.reason} at position {exc.start}: "
            f"{value[exc.start]!r}); was it read with the wrong encoding?"
        ) from None


def _episode_id(value: Any) -> str:
    # An id is printed by every tool that lists episodes and typed back to forget one: one
    # visible token, so that it can neither forge a line nor hide a part of itself.
    text = _text(value)
    if len(text) > ID_CHARS:
        raise _Invalid(f"at most {ID_CHARS} characters, not {len(text)}")
    if text.isascii() and text.isprintable() and " " not in text:
        return text  # (every id this library makes: nothing below can refuse it)
    for i, c in enumerate(text):
        if c.isspace() or is_hidden(c):
            raise _Invalid(
                f"no white space or invisible characters ({c!r} at position {i}); use letters, "
                f"digits and punctuation"
            )
    return text


PHASE_CHARS = 200


def _phase(value: Any) -> str:
    # A label shown beside the run in every listing: one line, visible characters. Spaces
    # are collapsed: "find the cause " names the same phase as "find the cause" (one item).
    text = _text(value)
    if " " in text:  # (only spaces: any other white space is refused below)
        text = " ".join(part for part in text.split(" ") if part)
    if len(text) > PHASE_CHARS:
        raise _Invalid(f"at most {PHASE_CHARS} characters, not {len(text)}")
    for i, c in enumerate(text):
        if is_hidden(c) or (c.isspace() and c != " "):
            raise _Invalid(
                f"one line of visible characters ({c!r} at position {i}); name the phase in "
                f"words, e.g. 'reproduce the bug'"
            )
    return text


def _conversation_id(value: Any) -> str:
    # Looked up as given (never redacted): one visible token, like an episode id.
    return _episode_id(value)


def _optional_text(value: Any) -> str | None:
    return None if value is None else _text(value)


def _outcome(value: Any) -> str:
    if value not in OUTCOMES or not isinstance(value, str):
        raise _Invalid(f"expected one of {', '.join(map(repr, OUTCOMES))}, not {shown(value)}")
    return value


def _source(value: Any) -> str:
    try:
        return check_source(value)
    except ValueError as exc:
        raise _Invalid(str(exc)) from None


_FOREIGN_SOURCE_CHARS = 40
_foreign_sources: set[str] = set()


def _stored_source(value: Any) -> str:
    # Another tool (or a newer version) may say where its outcomes came from in words this
    # library does not write: such a value is kept and shown (escaped), and read as no
    # source. It must still be one short visible token, like anything a listing prints.
    if isinstance(value, str) and value and value not in SOURCES:
        if len(value) > _FOREIGN_SOURCE_CHARS or any(is_hidden(c) or c.isspace() for c in value):
            raise _Invalid(f"not an outcome source: {shown(value)}")
        _check_encodable(value)
        if value not in _foreign_sources and len(_foreign_sources) < 100:
            _foreign_sources.add(value)
            log.warning(
                "an episode names the outcome source %s, which this version does not know: "
                "it is shown as stored and ranked as an outcome of no known source",
                shown(value),  # redacted: another tool's value may hold a token
            )
        return value
    return _source(value)


def _score(value: Any) -> float | None:
    if value is None:
        return None
    # bool is an int: True must not pass for a score of 1.0. Strings are refused too.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Invalid(f"expected a number or None, not {_kind(value)}")
    try:
        number = float(value)
    except OverflowError:  # an integer beyond any float
        raise _Invalid(
            f"expected a finite number, not an integer of {int(value).bit_length()} bits"
        ) from None
    if not math.isfinite(number):
        raise _Invalid(f"expected a finite number, not {value!r}")
    return number


def _unit_score(value: Any) -> float | None:
    number = _score(value)
    if number is not None and not 0.0 <= number <= 1.0:
        raise _Invalid(f"expected a number from 0 to 1, not {value!r}")
    return number


def _texts(value: Any) -> list[str]:
    if isinstance(value, str | bytes | dict) or not isinstance(
        value, list | tuple | set | frozenset
    ):
        raise _Invalid(f"expected a list of strings, not {_kind(value)}")
    items = list(value)
    for i, item in enumerate(items):
        try:
            _text(item)
        except _Invalid as exc:
            raise _Invalid(exc.message, f".{i}") from None
    return items


def _timestamp(value: Any) -> str:
    text = _text(value)
    if text:
        _time_or_invalid(text)
    return text


def _deadline(value: Any) -> str | None:
    text = _optional_text(value)
    if text:
        _time_or_invalid(text)
    return text or None


def _time_or_invalid(text: str) -> None:
    try:
        parse_time(text)
    except ValueError as exc:
        raise _Invalid(str(exc)) from None


def _kind(value: Any) -> str:
    return "None" if value is None else type(value).__name__


def _checked(name: str, check: Callable[[Any], Any], value: Any) -> Any:
    try:
        return check(value)
    except _Invalid as exc:
        raise InvalidEpisodeError(f"invalid episode: {name}{exc.where}: {exc.message}") from None


def _copy(value: Any) -> Any:
    return list(value) if isinstance(value, list) else value


_CHECKS: dict[str, Callable[[Any], Any]] = {
    "query": _text,
    "response": _text,
    "outcome": _outcome,
    "score": _unit_score,
    "tools_used": _texts,
    "reflection": _optional_text,
    "tags": _texts,
    "timestamp": _timestamp,
    "agent_id": _text,
    "id": _episode_id,
    "forget_after": _deadline,
    "approach": _text,
    "transcript_ref": _optional_text,
    "run_id": _text,
    "outcome_source": _source,
    "phase": _phase,
    "conversation_id": _conversation_id,
}


# Decoding accepts any stored id (a hand-edited or imported record keeps its id; the CLI escapes
# what it prints) and any finite score (deepcrew-ai took any): only new episodes are held to the
# id rules and to scores in [0, 1].
def _stored_id(value: Any) -> str:
    # Lenient on what record() now refuses (length, a space), strict on what would act on a
    # terminal or forge a line when listed: such a record is corrupt, not an episode to list.
    text = _text(value)
    if text.isascii() and text.isprintable():
        return text  # the usual id: printable ASCII holds no hidden character and no line break
    for i, c in enumerate(text):
        if is_hidden(c) or (c.isspace() and c != " "):
            raise _Invalid(f"holds the control or invisible character {c!r} at position {i}")
    return text


_DECODE_CHECKS = {
    **_CHECKS,
    "id": _stored_id,
    "score": _score,
    "outcome_source": _stored_source,
}

# The free-text fields, found from their checks, are what a Redactor redacts in an episode
# (the id is refused instead; the outcome, score and times are validated values).
register_text_fields(
    tuple(
        name
        for name, check in _CHECKS.items()
        if check in (_text, _optional_text, _texts, _phase) and name != "id"
    ),
    limits={"phase": PHASE_CHARS},
)
FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Episode))
# Every field but the required query, with its default.
_DEFAULTS: dict[str, Any] = {
    f.name: [] if f.default_factory is not dataclasses.MISSING else f.default
    for f in dataclasses.fields(Episode)
    if f.name != "query"
}
# One encoder for every record: json.dumps with options builds a new one on each call.
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


# The fields of a record (an Episode, a Grade) that hold a time, not text: a search for "2026"
# must not match every episode by its timestamp.
TIME_FIELDS = frozenset({"timestamp", "forget_after", "stamp"})

_TEXT_TYPES = frozenset({"str", "str | None", "list[str]"})


def stored_texts(record: Any) -> list[str]:
    """Every text *record* (an :class:`Episode` or a ``Grade``) holds, found from its fields'
    declared types rather than listed by hand, so a text field added later is searched (and
    forgotten by ``forget(containing=...)``) without a change here. Validated values (the
    outcome, the score, the times) are not text."""
    texts: list[str] = []
    for name in _text_field_names(type(record)):
        value = getattr(record, name)
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, list):
            texts.extend(v for v in value if isinstance(v, str))
    return texts


_TEXT_NAMES: dict[type, tuple[str, ...]] = {}


def _text_field_names(model: type) -> tuple[str, ...]:
    names = _TEXT_NAMES.get(model)
    if names is None:
        names = _TEXT_NAMES[model] = tuple(
            spec.name
            for spec in dataclasses.fields(model)
            if spec.name not in TIME_FIELDS and str(spec.type) in _TEXT_TYPES
        )
    return names


def check_field(name: str, value: Any) -> Any:
    """*value* checked as the :class:`Episode` field *name* checks it (for an argument that
    ends up in that field: a phase, a conversation id); raises
    :class:`~deepcrew_episodic.InvalidEpisodeError` naming the field."""
    return _checked(name, _CHECKS[name], value)


def run_key(episode: Episode) -> str:
    """What groups *episode* with the others of its run in recall (one item per key): its
    ``run_id`` and its ``phase``, so that the iterations of one phase are one item and the
    phases of one run are items of their own; ``""`` (no group) without a ``run_id``.

    A phase holds no NUL (it is one line of visible characters): ``run_id + NUL + phase`` for
    a phased episode, the ``run_id`` alone otherwise (with a trailing NUL when it holds one
    itself), so no two different pairs share a key."""
    run, phase = episode.run_id, episode.phase
    if not run:
        return ""
    if not phase and "\x00" not in run:
        return run
    return f"{run}\x00{phase}"


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
        raise ValueError(f"not an ISO-8601 time: {shown(value)}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    # An offset can carry a time past the years a datetime holds ("9999-12-31T23:59-01:00" is
    # in year 10000 in UTC): such a time could be stored but never shown or compared.
    try:
        ts = dt.timestamp()
        datetime.fromtimestamp(ts, UTC)
    except (OverflowError, ValueError, OSError):
        raise ValueError(f"time out of range (years 1 to 9999 in UTC): {shown(value)}") from None
    return ts
