"""A recall from end to end: its arguments checked once (:class:`RecallQuery`), then answered
from the index the store keeps (see _store_reads.py) or, when it keeps none, from the log this
process holds (see _held.py), by keywords or, with an embedder, by keywords and meaning. Both
answers run the same ranking rules (_ranking.py) and return the same ranking."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._exceptions import ConfigurationError
from ._held import HeldLog, ProcessView
from ._history import History
from ._options import Options, relevance_floor
from ._ranking import copied_ranking, keyword_ranking, outcome_filter, tag_filter
from ._recall import INTENTS, Ranking
from ._store_reads import StoreReads
from ._time import TimeLike, TimeReader
from ._validate import integer, shown

if TYPE_CHECKING:
    from ._semantic import Semantic  # only built with an embedder

__all__ = ["RecallQuery", "Searcher"]

log = logging.getLogger("deepcrew_episodic")


@dataclass(frozen=True, slots=True)
class RecallQuery:
    """One recall's arguments, checked (see :meth:`EpisodicMemory.recall` for each)."""

    text: str
    k: int
    intent: str
    outcomes: set[str] | None
    tags: set[str] | None
    since: float | None  # POSIX seconds, read in the memory's time zone
    until: float | None
    floor: float  # the relevance floor this recall applies


class Searcher:
    """The recalls of one memory."""

    def __init__(
        self,
        held: HeldLog,
        store: StoreReads,
        semantic: Semantic | None,
        expired: Callable[[int, float], bool],
        times: TimeReader,
        options: Options,
    ) -> None:
        self._held = held
        self._store = store
        self._semantic = semantic
        self._expired = expired  # the retention rule, by sequence number (see _retention.py)
        self._times = times
        self._options = options
        self._clock = options.clock

    async def explain(
        self,
        query: str,
        top_k: int | None,
        *,
        intent: str,
        tags: Collection[str] | None,
        outcome: str | Collection[str] | None,
        since: TimeLike | None,
        until: TimeLike | None,
        min_relevance: float | None,
    ) -> Ranking:
        """See :meth:`EpisodicMemory.explain`: its arguments checked, then ranked."""
        if not isinstance(query, str):
            raise ConfigurationError(f"query must be a string, not {type(query).__name__}")
        k = self._options.recall_k if top_k is None else integer("top_k", top_k, minimum=0)
        if intent not in INTENTS:
            raise ConfigurationError(f"intent must be one of {INTENTS}, not {shown(intent)}")
        outcomes = outcome_filter(outcome)
        wanted_tags = tag_filter(tags)
        after = await self._times.read("since", since)
        cutoff = await self._times.read("until", until)
        floor = (
            self._options.min_relevance
            if min_relevance is None
            else relevance_floor("min_relevance", min_relevance)
        )
        return await self.ranking(
            RecallQuery(query, k, intent, outcomes, wanted_tags, after, cutoff, floor)
        )

    async def every_run(self, task: str) -> int:
        """The *top_k* of a history of *task* (checked): no limit on the number of runs."""
        if not isinstance(task, str):
            raise ConfigurationError(f"task must be a string, not {type(task).__name__}")
        await self._held.sync()
        return max(1, self._held.max_episodes, len(self._held.known))

    def history(self, task: str, found: Ranking) -> History:
        """The runs of *task* its ranking *found* (from :meth:`every_run`), in time order."""
        return History(self._held.by_time(found), task=task)

    async def ranking(self, query: RecallQuery) -> Ranking:
        """The ranking for *query*: from the store's index when it keeps one this memory can
        rank from, otherwise from the log held in process."""
        started = time.perf_counter()
        if query.k > 0 and self._store.reads_store():
            in_store = await self._store.explain_in_store(
                query.text,
                query.k,
                intent=query.intent,
                outcomes=query.outcomes,
                tags=query.tags,
                since=query.since,
                until=query.until,
                floor=query.floor,
            )
            if in_store is not None:
                self._debug(in_store, started)
                return in_store
        ranking = await self._held_ranking(query)
        self._debug(ranking, started)
        return ranking

    async def _held_ranking(self, query: RecallQuery) -> Ranking:
        """The ranking from the log held in process (read, or brought up to date, first)."""
        await self._held.sync()
        if query.k == 0:
            return copied_ranking((), query.floor, ())
        semantic = self._semantic
        query_vector: Any = None
        error: str | None = None
        if semantic is not None:
            semantic.check_embedder()
            query_vector, error = await semantic.query_vector(query.text)
        view = ProcessView(self._held, self._options.reinforce, self._expired)
        index = self._held.index
        now = self._clock()
        half_life = self._options.half_life_days
        if semantic is not None and query_vector is not None:
            found, under = semantic.ranking(
                view,
                index,
                query.text,
                query_vector,
                query.k,
                now=now,
                intent=query.intent,
                half_life_days=half_life,
                outcomes=query.outcomes,
                tags=query.tags,
                since=query.since,
                until=query.until,
                floor=query.floor,
            )
        else:
            found, under = keyword_ranking(
                view,
                index,
                query.text,
                query.k,
                now=now,
                intent=query.intent,
                half_life_days=half_life,
                outcomes=query.outcomes,
                tags=query.tags,
                since=query.since,
                until=query.until,
                floor=query.floor,
            )
        ranking = copied_ranking([scored for _, scored in found], query.floor, under)
        if semantic is not None:
            ranking.by = "hybrid" if query_vector is not None else "keywords-fallback"
            ranking.embedder_error = error
        return ranking

    def _debug(self, ranking: Ranking, started: float) -> None:
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "recall in %r (%s): %d episodes in %.2f ms: %s",
                self._store.namespace,
                ranking.by,
                len(ranking),
                (time.perf_counter() - started) * 1000,
                [scored.episode.id for scored in ranking],
            )
