"""A backup restored: an episode recorded again with its grades and its use count, so that it
reads as it did when it was backed up. Everything is checked before anything is written."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from ._episode import Episode, now_iso
from ._exceptions import InvalidEpisodeError
from ._grade import NOTE_CHARS, Grade
from ._held import HeldLog
from ._log import EpisodeLog
from ._options import Options
from ._redact import redact_then_cut, safe_message
from ._validate import shown
from ._write import Writer

__all__ = ["MAX_USES", "Restorer"]

# The largest use count restore() takes (a counter holds at most 18 digits).
MAX_USES = 10**15


class Restorer:
    """How one memory restores what a backup kept beside an episode."""

    def __init__(
        self,
        episodes: EpisodeLog,
        held: HeldLog,
        options: Options,
        writer: Writer,
    ) -> None:
        self._log = episodes
        self._held = held
        self._writer = writer
        self._clock = options.clock
        self._redactor = options.redactor

    async def restore(
        self,
        episode: Episode | Any,
        grades: Sequence[Grade | Mapping[str, Any]],
        uses: int,
        record: Callable[[Episode | Any], Awaitable[Episode]],
    ) -> Episode:
        """See :meth:`EpisodicMemory.restore`. *record* is the memory's own (its span with it):
        everything is checked before it writes anything."""
        self._writer.check(episode)
        kept = self.check(grades, uses)
        stored = await record(episode)
        await self._restored(stored, kept, uses)
        return stored

    def check(self, grades: Sequence[Grade | Mapping[str, Any]], uses: int) -> list[Grade]:
        """The grades of a backup, checked (:class:`Grade` objects, or the mappings
        ``export`` writes), and its use count; :class:`InvalidEpisodeError` naming the
        first wrong one."""
        if isinstance(uses, bool) or not isinstance(uses, int) or not 0 <= uses <= MAX_USES:
            raise InvalidEpisodeError(
                f"invalid episode: uses: a whole number from 0 to {MAX_USES}, not {shown(uses)}"
            )
        if isinstance(grades, str | bytes | Mapping) or not isinstance(grades, Sequence):
            raise InvalidEpisodeError(
                f"grades must be a list of grades, not {safe_message(repr(grades), 80)}"
            )
        kept: list[Grade] = []
        for i, given in enumerate(grades, 1):
            try:
                grade = given if isinstance(given, Grade) else Grade.from_dict(given, "-")
            except InvalidEpisodeError as exc:
                raise InvalidEpisodeError(f"grade {i}: {exc}") from None
            if len(grade.note) > NOTE_CHARS:
                raise InvalidEpisodeError(f"grade {i}: a note has at most {NOTE_CHARS} characters")
            kept.append(grade)
        return kept

    async def _restored(self, stored: Episode, grades: Sequence[Grade], uses: int) -> None:
        """Give *stored* (just recorded) the *grades* and the use count checked by
        :meth:`check`: each grade keeps its outcome, score, note (redacted), verified flag
        and time."""
        for grade in grades:
            restored = dataclasses.replace(
                grade,
                episode_id=stored.id,
                note=redact_then_cut(grade.note, NOTE_CHARS, self._redactor) if grade.note else "",
                timestamp=grade.timestamp or now_iso(self._clock()),
                stamp=stored.timestamp,
            )
            await self._log.add_grade(restored)
        await self._held.sync()
        seq = self._held.ids.get(stored.id)
        if uses and seq is not None:  # (None: a ring too small for it pushed it out at once)
            await self._log.set_uses(seq, uses)
