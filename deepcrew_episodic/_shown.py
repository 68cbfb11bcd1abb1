"""What a memory shows, outside recall: every episode (``load``), a page of them, a conversation's
latest, an episode's grades, the use counts, and whether one episode has expired. Each is read
from the index the store keeps where it keeps one (see _store_reads.py), and otherwise from the
log this process holds (see _held.py), through the same retention rule (see _retention.py)."""

from __future__ import annotations

from ._episode import Episode
from ._exceptions import ConfigurationError
from ._grade import Grade
from ._held import UNDATED, HeldLog
from ._listing import Page
from ._options import Options
from ._retention import Retention
from ._store_reads import StoreReads
from ._validate import boolean, integer, shown

__all__ = ["Shown"]


class Shown:
    """The read paths of one memory that are no recall."""

    def __init__(
        self,
        held: HeldLog,
        store: StoreReads,
        retention: Retention,
        options: Options,
    ) -> None:
        self._held = held
        self._store = store
        self._retention = retention
        self._options = options
        self._clock = options.clock

    async def refresh(self) -> int:
        """See :meth:`EpisodicMemory.refresh`."""
        await self._held.sync()
        return self._held.revision

    async def load(self, *, include_expired: bool, graded: bool) -> list[Episode]:
        """See :meth:`EpisodicMemory.load`."""
        include_expired = boolean("include_expired", include_expired)
        graded_view = boolean("graded", graded)
        await self._held.sync()
        now = self._clock()
        return [
            (self._held.view(ep) if graded_view else ep).copy()
            for seq, ep in self._held.cached()
            if include_expired or not self._retention.expired(seq, now)
        ]

    async def page(self, limit: int, offset: int) -> Page:
        """See :meth:`EpisodicMemory.page`."""
        limit = integer("limit", limit, minimum=0)
        offset = integer("offset", offset, minimum=0)
        if self._store.reads_store():
            max_age = self._options.max_age
            seconds = None if max_age is None else max_age.total_seconds()
            found: Page | None = await self._store.page_in_store(limit, offset, seconds)
            if found is not None:
                return found
        await self._held.sync()
        now = self._clock()
        # Only the page is copied (a copy costs about 11 µs, a check 0.3 µs).
        listed = [
            (seq, ep) for seq, ep in self._held.cached() if not self._retention.expired(seq, now)
        ]
        chosen = listed[::-1][offset : offset + limit]
        return Page([self._held.view(ep).copy() for _, ep in chosen], len(listed), offset)

    async def latest(self, conversation_id: str) -> Episode | None:
        """See :meth:`EpisodicMemory.latest`."""
        if not isinstance(conversation_id, str) or not conversation_id:
            raise ConfigurationError(
                f"conversation_id must be a non-empty string, not {shown(conversation_id)}"
            )
        if self._store.reads_store():
            found = await self._store.latest_in_store(conversation_id)
            if found is None or isinstance(found, Episode):
                return found
        await self._held.sync()
        now = self._clock()
        for seq in reversed(self._held.conversations.get(conversation_id, [])):
            if seq in self._held.known and not self._retention.expired(seq, now):
                return self._held.view(self._held.episode(seq)).copy()
        return None

    async def grades(self, episode_id: str | None) -> list[Grade]:
        """See :meth:`EpisodicMemory.grades`."""
        if episode_id is not None and not isinstance(episode_id, str):
            raise ConfigurationError(
                f"grades() takes one episode id (a string) or none, not {type(episode_id).__name__}"
            )
        if episode_id is not None and self._store.reads_store():
            found = await self._store.grades_in_store(episode_id)
            if found is not None:
                return found
        await self._held.sync()
        held = self._held
        if episode_id is None:
            return [g for grades in held.grades.values() for g in grades if held.applies(g)]
        return [g for g in held.grades.get(episode_id, ()) if held.applies(g)]

    async def uses(self) -> dict[str, int]:
        """See :meth:`EpisodicMemory.uses`."""
        await self._held.sync()
        return {
            self._held.known[seq].id: count
            for seq, count in sorted(self._held.uses.items())
            if count > 0 and seq in self._held.known
        }

    def is_expired(self, episode: Episode) -> bool:
        """See :meth:`EpisodicMemory.is_expired` (no I/O: as of the last read)."""
        if not isinstance(episode, Episode):
            raise ConfigurationError(f"is_expired() takes an Episode, not {type(episode).__name__}")
        now = self._clock()
        seq = self._held.ids.get(episode.id) if episode.id else None
        if seq is not None:
            return self._retention.expired(seq, now)
        known = self._store.times_of(episode)
        if known is not None:
            # Read from the store's index (this memory does not hold the log): its time as
            # the index files it (an undated episode: the time of the one before it).
            return self._retention.past(known[0], known[1], now)
        return self._retention.expired_episode(episode, now)

    def recorded_at(self, episode: Episode) -> float | None:
        """See :meth:`EpisodicMemory.recorded_at` (no I/O: as of the last read)."""
        if not isinstance(episode, Episode):
            raise ConfigurationError(
                f"recorded_at() takes an Episode, not {type(episode).__name__}"
            )
        seq = self._held.ids.get(episode.id) if episode.id else None
        known = self._held.known.get(seq) if seq is not None else None
        if known is None or known.recorded == UNDATED:
            return None
        return known.recorded

    def searched_text(self, episode: Episode) -> str:
        """See :meth:`EpisodicMemory.searched_text` (no I/O: as of the last read)."""
        if not isinstance(episode, Episode):
            raise ConfigurationError(
                f"searched_text() takes an Episode, not {type(episode).__name__}"
            )
        return self._held.text_of(episode)
