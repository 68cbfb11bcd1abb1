"""Retention: which episodes are past their time (the one rule, ``Retention.past``), and the
deletions (forget, sweep, shrink) that remove an episode with everything stored for it: its
vectors, use counts, id claim and grades, through the log."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection
from typing import TYPE_CHECKING

from ._episode import Episode
from ._exceptions import ConfigurationError
from ._held import FUTURE_SKEW_SECONDS, UNDATED, HeldLog, time_or_none
from ._log import EpisodeLog
from ._options import Options
from ._ranking import outcome_filter, tag_filter
from ._redact import safe_message
from ._time import TimeLike
from ._unicode import search_form
from ._validate import boolean, shown, strings

if TYPE_CHECKING:
    from ._telemetry import Tracing  # only with telemetry

__all__ = ["Retention"]

log = logging.getLogger("deepcrew_episodic")


class Retention:
    """The retention rule of one memory and the deletions it makes."""

    def __init__(
        self,
        episodes: EpisodeLog,
        held: HeldLog,
        options: Options,
        read_time: Callable[[str, TimeLike | None], Awaitable[float | None]],
    ) -> None:
        self._log = episodes
        self._held = held
        self._clock = options.clock
        self._max_age = options.max_age
        self._time = read_time  # the memory's: its time zone and clock

    @property
    def namespace(self) -> str:
        return self._log.namespace

    async def clear(self) -> None:
        """Delete every episode of the namespace, with everything stored for it."""
        await self._log.clear()
        await self._log.purge()

    async def forget(
        self,
        ids: str | Collection[str] | None = None,
        *,
        outcome: str | Collection[str] | None = None,
        tags: Collection[str] | None = None,
        before: TimeLike | None = None,
        containing: str | None = None,
        corrupt: bool = False,
        dry_run: bool = False,
    ) -> int:
        corrupt = boolean("corrupt", corrupt)
        dry_run = boolean("dry_run", dry_run)
        filtered = not (
            ids is None and outcome is None and tags is None and before is None and not containing
        )
        selected: list[tuple[int, Episode]] = []
        if filtered or not corrupt:
            selected = await self.select(
                ids=ids, outcome=outcome, tags=tags, before=before, containing=containing
            )
        else:
            await self._held.sync()
        bad: list[str] = []
        if corrupt:
            bad = [*(await self._log.beyond_view())[1], *self._log.corrupt_keys()]
        if dry_run:
            return len(selected) + len(bad)
        if selected or bad:
            # Payloads below the log's ring go too (a dead writer's, a late writer's), and
            # the id claims of what is deleted, so that no copy is left behind.
            strays = await self._log.stray_keys()
            gone = {ep.id for _, ep in selected}
            await self._log.delete_episodes(
                [seq for seq, _ in selected],
                ids=[ep.id for _, ep in selected],
                grades=[n for n, i in self._held.graded_by.items() if i in gone],
                also=[*bad, *strays],
            )
        await self._log.purge()
        log.info(
            "forget in %r: %d episodes, %d corrupt records deleted",
            self.namespace,
            len(selected),
            len(bad),
        )
        return len(selected) + len(bad)

    async def shrink(self, max_episodes: int) -> int:
        deleted = await self._log.shrink(max_episodes)
        # The grades of what was deleted go too: their notes are the episodes' text as well.
        await self._held.sync()
        kept = {ep.id for _, ep in await self._held.everything()}
        orphans = [n for n, i in self._held.graded_by.items() if i not in kept]
        if orphans:
            await self._log.delete_episodes([], grades=orphans)
        await self._log.purge()
        return deleted

    async def selected(
        self,
        ids: str | Collection[str] | None,
        *,
        outcome: str | Collection[str] | None,
        tags: Collection[str] | None,
        before: TimeLike | None,
        containing: str | None,
    ) -> list[Episode]:
        """See :meth:`EpisodicMemory.select` (copies)."""
        found = await self.select(
            ids=ids, outcome=outcome, tags=tags, before=before, containing=containing
        )
        return [ep.copy() for _, ep in found]

    async def select(
        self,
        *,
        ids: str | Collection[str] | None = None,
        outcome: str | Collection[str] | None = None,
        tags: Collection[str] | None = None,
        before: TimeLike | None = None,
        containing: str | None = None,
    ) -> list[tuple[int, Episode]]:
        """The stored episodes (expired included) matching every given criterion."""
        if ids is None and outcome is None and tags is None and before is None and not containing:
            raise ConfigurationError(
                "forget() needs ids or a filter (outcome, tags, before, containing); "
                "clear() deletes every episode"
            )
        wanted_ids = None if ids is None else set(strings("ids", ids, one=True))
        outcomes = outcome_filter(outcome)
        wanted_tags = tag_filter(tags)
        cut = await self._time("before", before)
        if containing is not None and not isinstance(containing, str):
            raise ConfigurationError(f"containing must be a string, not {shown(containing)}")
        needle = search_form(containing) if containing else None
        if containing and not needle:
            # White space or hidden characters only would match every episode: refused.
            raise ConfigurationError(
                f"containing holds no visible text ({safe_message(containing, 60)!r})"
            )
        await self._held.sync()
        selected: list[tuple[int, Episode]] = []
        for seq, ep in await self._held.everything():
            if wanted_ids is not None and ep.id not in wanted_ids:
                continue
            if outcomes is not None and ep.outcome not in outcomes:
                continue
            if wanted_tags is not None and not wanted_tags & {t.casefold() for t in ep.tags}:
                continue
            if cut is not None and self._held.recorded(seq, ep) >= cut:
                continue
            if needle is not None and needle not in self._held.text_of(ep):
                continue
            selected.append((seq, ep))
        return selected

    async def sweep(self, *, dry_run: bool = False, tracing: Tracing | None = None) -> int:
        """See :meth:`EpisodicMemory.sweep`; *tracing* gets the count of expired records."""
        dry_run = boolean("dry_run", dry_run)
        await self._held.sync()
        now = self._clock()
        everything = await self._held.everything()
        expired = [
            (seq, ep)
            for seq, ep in everything
            if (
                self.expired(seq, now) if seq in self._held.known else self.expired_episode(ep, now)
            )
        ]
        if tracing is not None:
            tracing.count(len(expired))
        strays = await self._log.stray_keys()
        # Grades of episodes the log no longer keeps (evicted, forgotten by another process).
        kept = {ep.id for _, ep in everything} - {ep.id for _, ep in expired}
        orphans = [n for n, i in self._held.graded_by.items() if i not in kept]
        if dry_run:
            return len(expired) + len(strays) + len(orphans)
        if expired or strays or orphans:
            await self._log.delete_episodes(
                [seq for seq, _ in expired],
                ids=[ep.id for _, ep in expired],
                grades=orphans,
                also=strays,
            )
        await self._log.purge()  # and what ring evictions left in a journal
        log.info(
            "sweep of %r: %d expired episodes, %d stray keys deleted",
            self.namespace,
            len(expired),
            len(strays) + len(orphans),
        )
        return len(expired) + len(strays) + len(orphans)

    def expired(self, seq: int, now: float) -> bool:
        known = self._held.known.get(seq)
        return known is not None and self.past(known.forget_at, known.recorded, now)

    def expired_episode(self, episode: Episode, now: float) -> bool:
        recorded = time_or_none(episode.timestamp)
        if recorded is None or recorded > now + FUTURE_SKEW_SECONDS:
            recorded = UNDATED
        return self.past(time_or_none(episode.forget_after), recorded, now)

    def past(self, forget_at: float | None, recorded: float, now: float) -> bool:
        """The retention rule, the one place it is stated: past ``forget_after``, or older
        than ``max_age``."""
        if forget_at is not None and forget_at <= now:
            return True
        return self._max_age is not None and recorded < now - self._max_age.total_seconds()
