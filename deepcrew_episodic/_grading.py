"""Grades given after a run: the checks a grade passes and the record it becomes (see
_grade.py for the record and the rule that applies it)."""

from __future__ import annotations

import logging

from ._episode import OUTCOMES, Episode, Outcome, now_iso, outcome_for_score, score_fits
from ._exceptions import ConfigurationError
from ._grade import NOTE_CHARS, Grade
from ._held import HeldLog
from ._log import EpisodeLog
from ._options import Options
from ._redact import redact_then_cut, safe_message
from ._retention import Retention
from ._source import CHECKED_SOURCES, OutcomeSource, check_source
from ._unicode import escape_hidden
from ._validate import boolean, number

__all__ = ["Grading"]

log = logging.getLogger("deepcrew_episodic")


class Grading:
    """Grades one memory gives its episodes."""

    def __init__(
        self,
        episodes: EpisodeLog,
        held: HeldLog,
        retention: Retention,
        options: Options,
    ) -> None:
        self._log = episodes
        self._held = held
        self._retention = retention
        self._clock = options.clock
        self._redactor = options.redactor

    async def grade(
        self,
        episode_id: str,
        *,
        outcome: Outcome | None,
        score: float | None,
        note: str,
        verified: bool | None,
        source: str | None,
    ) -> Grade:
        """See :meth:`EpisodicMemory.grade`."""
        if not isinstance(episode_id, str) or not episode_id:
            raise ConfigurationError(f"episode_id must be a non-empty string, not {episode_id!r}")
        if outcome is not None and outcome not in OUTCOMES:
            raise ConfigurationError(f"unknown outcome {outcome!r}; expected one of {OUTCOMES}")
        if score is not None:
            score = number("score", score, minimum=0.0, maximum=1.0)
        if outcome is None and score is None:
            raise ConfigurationError("grade() needs an outcome, a score or both")
        if outcome is not None and score is not None and not score_fits(outcome, score):
            raise ConfigurationError(
                f"the outcome {outcome!r} and the score {score:g} disagree (a score of 0.7 or "
                f"more is a success, below 0.3 a failure, partial between; unknown and "
                f"abandoned take no score): give the one you mean, or both agreeing"
            )
        if not isinstance(note, str) or len(note) > NOTE_CHARS:
            raise ConfigurationError(f"note must be a string of at most {NOTE_CHARS} characters")
        verified, source = _grade_source(verified, source)
        await self._held.sync()
        target: Episode | None = None
        if episode_id in self._held.ids:
            target = self._log.episode(self._held.ids[episode_id])
        else:
            target = next(
                (ep for _, ep in (await self._log.beyond_view())[0] if ep.id == episode_id), None
            )
        if target is None:
            raise ConfigurationError(
                f"no episode with id {safe_message(episode_id, 140)!r} in namespace "
                f"{escape_hidden(self._log.namespace)!r}"
            )
        if self._retention.expired_episode(target, self._clock()) or (
            episode_id in self._held.ids
            and self._retention.expired(self._held.ids[episode_id], self._clock())
        ):
            # Expired is invisible on every path: a grade would only be swept with it.
            raise ConfigurationError(
                f"episode {safe_message(episode_id, 140)!r} has expired (hidden from every "
                f"read path; sweep deletes it)"
            )
        chosen: Outcome = outcome if outcome is not None else outcome_for_score(score or 0.0)
        grade = Grade(
            episode_id,
            chosen,
            score,
            # Redacted, then cut back to NOTE_CHARS (a marker can be longer than the secret it
            # replaces): what is stored must restore from a backup.
            redact_then_cut(note, NOTE_CHARS, self._redactor) if note else "",
            verified,
            now_iso(self._clock()),
            target.timestamp,
            source,
        )
        await self._log.add_grade(grade)
        log.info(
            "episode graded",
            extra={"namespace": self._log.namespace, "id": episode_id, "outcome": chosen},
        )
        return grade


def _grade_source(verified: bool | None, source: str | None) -> tuple[bool, OutcomeSource]:
    """``grade()``'s *verified* flag and *source*, checked against each other."""
    if verified is not None:
        verified = boolean("verified", verified)
    if source is None:
        return (True if verified is None else verified), ""
    try:
        said = check_source(source)
    except ValueError as exc:
        raise ConfigurationError(f"source: {exc}") from None
    if not said:
        return (True if verified is None else verified), ""
    checked = said in CHECKED_SOURCES
    if verified is not None and verified != checked:
        raise ConfigurationError(
            f"verified={verified} contradicts source={said!r} (a grade from a verifier or "
            f"the user is verified; the agent's claim or a model's judgement is not): give one"
        )
    return checked, said
