"""Grades: the outcome of an episode learnt after it was recorded, kept as records of their own.

The signal that a run worked often arrives later than the run: the user's next message ("thanks,
that fixed it" / "still broken"), a test run, a reviewer. :meth:`EpisodicMemory.grade` appends a
:class:`Grade`; the episode itself is never rewritten. Every read path applies the grades with
one rule (:func:`graded`): the outcome from the best source wins, the newest among equals
(:func:`~deepcrew_episodic._source.precedence`), the episode's own outcome counting as the
oldest, and as the user's when it was checked (any checked grade corrects it). So a verifier's
grade beats the user's, the user's beats the agent's claim, a claim beats a model's judgement;
a verified outcome always beats a claimed one; and a ``success`` claimed by the agent reads
``claimed_success``. A grade's ``verified`` flag follows its source
(a grade with no source is verified or a claim as its flag says, as grades always were).

A grade given as a score only takes its outcome from :func:`~deepcrew_episodic.outcome_for_score`.
The grade that decides the outcome decides the score too: the episode reads the grade's score,
or none when the grade gave none (the recorded score went with the recorded outcome), so the
outcome and the score shown never contradict each other. A stored grade whose score disagrees
with its outcome (``grade()`` refuses to write one) reads with its outcome and no score; so
does an episode recorded with a score that says the opposite of its outcome (a success scored
below 0.3, a failure scored 0.7 or more: :func:`~deepcrew_episodic._episode.score_contradicts`).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._episode import OUTCOMES, Episode, Outcome, score_contradicts, score_fits
from ._exceptions import InvalidEpisodeError
from ._source import CHECKED_SOURCES, SOURCES, OutcomeSource, precedence
from ._unicode import is_hidden
from ._validate import shown

__all__ = ["Grade"]

log = logging.getLogger("deepcrew_episodic")

NOTE_CHARS = 2000


@dataclass(frozen=True, slots=True)
class Grade:
    """One grade of one episode (see :meth:`EpisodicMemory.grade`)."""

    episode_id: str
    outcome: Outcome
    score: float | None = None
    note: str = ""
    verified: bool = True
    timestamp: str = ""
    stamp: str = ""
    """The graded episode's own timestamp: a grade applies to that episode only, never to a
    later one that reuses its id after it was evicted or forgotten."""
    source: OutcomeSource = ""
    """Where the grade came from: ``"verifier"``, ``"user"``, ``"agent"``, ``"judge"``, or
    ``""`` (then ``verified`` says whether it was checked, as grades without a source read)."""

    @property
    def effective_source(self) -> OutcomeSource:
        """The source this grade counts as: its own, else the verified flag's (``""``: checked,
        from no recorded source; ``"agent"``: a claim)."""
        if self.source in SOURCES:
            return self.source  # a value another tool wrote is not one of them
        return "" if self.verified else "agent"

    @property
    def rank(self) -> int:
        """How much this grade counts, 0 best: a verifier's 0, the user's (or an unsourced
        verified grade's) 1, the agent's claim 2, a model's judgement 3. Among an episode's
        grades the best rank decides, the newest among equals."""
        source = self.effective_source
        return SOURCES.index(source) if source in SOURCES else 1

    @property
    def reads_as(self) -> tuple[str, OutcomeSource]:
        """The outcome and the outcome source an episode this grade decides reads: a success
        the agent claimed reads ``claimed_success``."""
        source = self.effective_source
        outcome = (
            "claimed_success" if self.outcome == "success" and source == "agent" else self.outcome
        )
        return outcome, source if source in SOURCES else ""

    def applies_to(self, episode: Episode) -> bool:
        return not self.stamp or self.stamp == episode.timestamp

    def to_json(self) -> str:
        return json.dumps(
            {
                "episode": self.episode_id,
                "outcome": self.outcome,
                "score": self.score,
                "note": self.note,
                "verified": self.verified,
                "timestamp": self.timestamp,
                "stamp": self.stamp,
                **({"source": self.source} if self.source else {}),
            },
            ensure_ascii=False,
            separators=(",", ":"),
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], episode_id: str) -> Grade:
        """A grade of *episode_id* as ``export`` writes it (``outcome``, ``score``, ``note``,
        ``verified``, ``timestamp``), checked like a stored one; raises
        :class:`InvalidEpisodeError` naming what is wrong."""
        if not isinstance(data, Mapping):
            raise InvalidEpisodeError(f"a grade is a JSON object, not {type(data).__name__}")
        fields = {"note": "", "timestamp": "", **data}
        if "verified" not in fields:
            source = fields.get("source", "")
            fields["verified"] = source in CHECKED_SOURCES if source in SOURCES else True
        fields.update(episode=episode_id, stamp="")
        try:
            return cls.from_json(json.dumps(fields))
        except (TypeError, ValueError) as exc:
            raise InvalidEpisodeError(f"invalid grade: {exc}") from None

    @classmethod
    def from_json(cls, raw: str) -> Grade:
        """A stored grade; ``ValueError`` when it is not one (it is then skipped and counted)."""
        try:
            data = json.loads(raw)
        except RecursionError:
            raise ValueError("grade record is nested too deeply") from None
        if not isinstance(data, dict):
            raise ValueError("grade record is not a JSON object")
        episode, outcome, score = data.get("episode"), data.get("outcome"), data.get("score")
        note, verified, timestamp = (
            data.get("note", ""),
            data.get("verified"),
            data.get("timestamp", ""),
        )
        stamp = data.get("stamp", "")
        source = data.get("source", "")
        if not isinstance(episode, str) or not episode:
            raise ValueError("grade record names no episode")
        if outcome not in OUTCOMES or not isinstance(outcome, str):
            raise ValueError(f"grade record holds the outcome {shown(outcome)}")
        if score is not None and (
            isinstance(score, bool)
            or not isinstance(score, int | float)
            # The range first: it compares an integer of any size exactly (isfinite would
            # overflow on one past a float), and refuses NaN too.
            or not 0.0 <= score <= 1.0
            or not math.isfinite(score)
        ):
            raise ValueError(f"grade record holds the score {shown(score)}")
        if verified is None and "verified" not in data:
            # A writer that names the source may leave the flag out: the source says it (and a
            # grade of neither is checked, as grade() gives it by default).
            verified = source in CHECKED_SOURCES if source in SOURCES else True
        if not isinstance(note, str) or not isinstance(verified, bool):
            raise ValueError("grade record holds a bad note or verified flag")
        if not isinstance(timestamp, str) or not isinstance(stamp, str):
            raise ValueError("grade record holds a bad timestamp")
        if not isinstance(source, str) or (
            source not in SOURCES
            and (len(source) > 40 or any(c.isspace() or is_hidden(c) for c in source))
        ):
            # As an episode's: the source falls back to none, the grade itself still counts.
            log.warning(
                "grade of episode %s: unreadable source %s read as none",
                shown(episode),
                shown(source),
            )
            source = ""
        if source in SOURCES and verified != (source in CHECKED_SOURCES):
            # The source is the better-defined of the two (a writer that sets one sets both).
            verified = source in CHECKED_SOURCES
        chosen: Outcome = outcome  # type: ignore[assignment]  # checked against OUTCOMES above
        value = None if score is None else float(score)
        # A source another tool wrote is kept as stored (it counts as none: effective_source).
        said: OutcomeSource = source  # type: ignore[assignment]
        return cls(episode, chosen, value, note, verified, timestamp, stamp, said)


def deciding(episode: Episode, grades: Sequence[Grade]) -> Grade | None:
    """The grade that decides *episode*'s outcome (``None``: its own outcome stands): the one
    from the best source, the newest among equals. The episode's own outcome is the oldest
    candidate of its rank, and a checked one ranks with the user's: a grade is a correction
    learnt later, so any checked grade (a verifier's, the user's) overrides what the run
    recorded, while a claim or a judgement never overrides a checked outcome."""
    rank = max(precedence(episode.outcome, episode.outcome_source), 1)
    best: Grade | None = None
    for grade in grades:
        if not grade.applies_to(episode):
            continue
        # A verified grade with no source ranks with the user's (it corrects any outcome the
        # run recorded, as verified grades always did).
        if grade.rank <= rank:
            best, rank = grade, grade.rank
    return best


def checked_grade(episode: Episode, grades: Sequence[Grade]) -> bool:
    """Whether *episode*'s outcome was decided by a checked grade (a verifier's, the user's,
    or one of no source given as verified): the outcome was learnt outside the agent."""
    grade = deciding(episode, grades)
    return grade is not None and grade.verified


def graded(episode: Episode, grades: Sequence[Grade]) -> Episode:
    """*episode* as its grades (oldest first) make it: a copy when one applies, else itself
    (a copy without its score when the recorded score contradicts the recorded outcome)."""
    grade = deciding(episode, grades)
    if grade is None:
        if not score_contradicts(episode.outcome, episode.score):
            return episode
        copy = episode.copy()
        copy.score = None
        return copy
    outcome, source = grade.reads_as
    copy = episode.copy()
    copy.outcome = outcome  # type: ignore[assignment]  # one of OUTCOMES (reads_as keeps it)
    copy.outcome_source = source
    score = grade.score
    copy.score = score if score is not None and score_fits(grade.outcome, score) else None
    return copy
