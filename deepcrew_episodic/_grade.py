"""Grades: the outcome of an episode learnt after it was recorded, kept as records of their own.

The signal that a run worked often arrives later than the run: the user's next message ("thanks,
that fixed it" / "still broken"), a test run, a reviewer. :meth:`EpisodicMemory.grade` appends a
:class:`Grade`; the episode itself is never rewritten. Every read path applies the grades with
one rule (:func:`graded`):

- the newest *verified* grade wins (a test, an exit code, the user: ``verified=True``);
- without one, an episode whose own outcome is verified (``success``/``failure``) keeps it: a
  verified outcome always beats a claimed one;
- otherwise the newest unverified grade applies, and a claimed ``success`` reads
  ``claimed_success``.

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
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._episode import OUTCOMES, VERIFIED, Episode, Outcome, score_contradicts, score_fits
from ._exceptions import InvalidEpisodeError
from ._validate import shown

__all__ = ["Grade"]

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
        fields = {"note": "", "verified": True, "timestamp": "", **data}
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
            data.get("timestamp"),
        )
        stamp = data.get("stamp", "")
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
        if not isinstance(note, str) or not isinstance(verified, bool):
            raise ValueError("grade record holds a bad note or verified flag")
        if not isinstance(timestamp, str) or not isinstance(stamp, str):
            raise ValueError("grade record holds a bad timestamp")
        chosen: Outcome = outcome  # type: ignore[assignment]  # checked against OUTCOMES above
        value = None if score is None else float(score)
        return cls(episode, chosen, value, note, verified, timestamp, stamp)


def graded(episode: Episode, grades: Sequence[Grade]) -> Episode:
    """*episode* as its grades (oldest first) make it: a copy when one applies, else itself
    (a copy without its score when the recorded score contradicts the recorded outcome)."""
    grades = [g for g in grades if g.applies_to(episode)]
    verified = [g for g in grades if g.verified]
    if verified:
        grade = verified[-1]
        outcome = grade.outcome
    elif not grades or episode.outcome in VERIFIED:
        if not score_contradicts(episode.outcome, episode.score):
            return episode
        copy = episode.copy()
        copy.score = None
        return copy
    else:
        grade = grades[-1]
        outcome = "claimed_success" if grade.outcome == "success" else grade.outcome
    copy = episode.copy()
    copy.outcome = outcome
    score = grade.score
    copy.score = score if score is not None and score_fits(grade.outcome, score) else None
    return copy
