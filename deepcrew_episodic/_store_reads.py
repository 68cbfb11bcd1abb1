"""Reads from the index a store keeps beside the log (a provider with ``recall_index``): a
ranking, an episode's grades, a conversation's latest episode and an id check, each answered
without reading the whole log into this process. ``None`` (or ``False``) from any of them means
"read the log in process" (see _held.py): deepcrew-ai's layout, or an index that disagrees."""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

from ._episode import Episode
from ._grade import Grade
from ._held import FUTURE_SKEW_SECONDS
from ._log import Counters, EpisodeLog
from ._options import Options
from ._ranking import copied_ranking, keyword_ranking
from ._recall import DEFAULT_FIELDS, Ranking, RecallIndex

__all__ = ["StoreReads", "StoreView"]

log = logging.getLogger("deepcrew_episodic")

T = TypeVar("T")

# How many returned episodes' times a memory keeps for is_expired() (see StoreReads._times).
_TIMES = 4096
# After how many searches that found something missing in what is kept of a namespace (at
# one revision) it is read whole (see CachingReader.load).
_WHOLE_AFTER = 2


class StoreReads:
    """The read paths of one memory that the store's index answers."""

    def __init__(
        self,
        episodes: EpisodeLog,
        index: RecallIndex,
        options: Options,
        past: Callable[[float | None, float, float], bool],
    ) -> None:
        self._log = episodes
        self._provider = episodes.provider  # (its declared capability only: no call)
        self._index = index  # the in-process index: its fields say what this memory ranks by
        self._clock = options.clock
        self._half_life = options.half_life_days
        self._reinforce = options.reinforce
        self._past = past  # the retention rule (see _retention.py)
        self.semantic: Any = None  # the memory's Semantic, with an embedder (set after it)
        self._off: list[tuple[str | None, int]] = []  # counters found off their records
        self._bad_grades: set[str] = set()  # undecodable grade records met by a search
        self._counted_grades: set[str] = set()
        # (id, timestamp) -> (forget_at, recorded) of the episodes the latest reads returned:
        # what is_expired() and render() judge them by (bounded: the newest _TIMES only).
        self._times: OrderedDict[tuple[str, str], tuple[float | None, float]] = OrderedDict()
        self._noted: set[tuple[str | None, int]] = set()

    @property
    def namespace(self) -> str:
        return self._log.namespace

    def _shown(self, reader: Any, head: Any) -> range:
        """The sequence numbers this memory shows, by the records the index holds rather than
        the counter alone (never trusted over them): a counter behind the newest record, or a
        whole view past every record, is read as the log's sync reads it (up to the newest
        record), and noted once per state."""
        live = self._log.live_range(head)
        newest = reader.newest_seq()
        if newest > head.last and not reader.records([newest]):
            from ._index import StaleIndexError

            # A row the index holds without its record (edited): it must not move the view.
            raise StaleIndexError(f"the index holds episode {newest}, the log does not")
        if newest > head.last or 0 < newest < live.start:
            self._off.append((head.raw_seq, newest))
            return self._log.live_range(dataclasses.replace(head, last=newest))
        return live

    def times_of(self, episode: Episode) -> tuple[float | None, float] | None:
        """``(forget_at, recorded)`` of *episode* as the index filed it, when a recent read
        from the store returned it (``None``: not known here)."""
        return self._times.get((episode.id, episode.timestamp))

    def _remember(self, index: Any, seqs: Any) -> None:
        for seq in seqs:
            entry = index.facts(seq)
            if entry is None:
                continue
            facts = entry.facts
            key = (facts.episode_id, facts.timestamp)
            self._times[key] = (facts.forget_at, facts.when)
            self._times.move_to_end(key)
        while len(self._times) > _TIMES:
            self._times.popitem(last=False)

    def _note_grades(self) -> None:
        """Count and log, once each, the grade records a search skipped (undecodable)."""
        for raw in self._bad_grades - self._counted_grades:
            self._counted_grades.add(raw)
            self.counters.corrupt_records += 1
            log.warning("episodic log %r: skipping an undecodable grade record", self.namespace)
        self._bad_grades.clear()

    def _recovered(self, exc: Exception, what: str) -> None:
        self.counters.recovered_indexes += 1
        log.warning(
            "episodic log %r: the store's recall index disagrees with the log (%s); "
            "%s from the log read in this process",
            self.namespace,
            exc,
            what,
        )

    def _note_counter(self) -> None:
        for raw, newest in self._off:
            if (raw, newest) not in self._noted:
                self._noted.add((raw, newest))
                self.counters.recovered_indexes += 1
                log.warning(
                    "episodic log %r: episode counter %r disagrees with the records it "
                    "numbers; reading up to %d (the next write repairs it)",
                    self.namespace,
                    raw,
                    newest,
                )
        self._off.clear()

    @property
    def counters(self) -> Counters:
        return self._log.counters

    def reads_store(self) -> bool:
        """Whether recall reads the index the store keeps (instead of reading the whole log
        into this process): the store keeps one, for the fields and weights this memory
        ranks by, and this memory does not hold the log already (a memory that read it for
        another call ranks from what it holds, kept up to date at each call)."""
        return (
            self._provider.recall_index
            and not self._log.synced
            and self._index.fields == DEFAULT_FIELDS
        )

    async def stored_id(self, episode_id: str) -> bool | None:
        """Whether this memory shows an episode with id *episode_id* (record() refuses to
        store a second one), read from the store's index (``None``: read the log)."""
        from ._index import StaleIndexError

        if self.reads_store():
            head = await self._log.read_head()
            if head.legacy is None:

                def run(reader: Any) -> bool:
                    live = self._shown(reader, head)
                    return any(seq in live for seq in reader.with_id(episode_id))

                try:
                    found: bool = await self._log.read_index(run)
                except StaleIndexError as exc:
                    self._recovered(exc, "looking the id up")
                    return None
                self._note_counter()
                return found
        return None

    async def latest_in_store(self, conversation_id: str) -> Episode | bool | None:
        """latest() read from the store's index (``False``: read the log in process)."""
        from ._index import StaleIndexError, StoreIndex

        head = await self._log.read_head()
        if head.legacy is not None:
            return False
        now = self._clock()

        def run(reader: Any) -> Episode | bool | None:
            live = self._shown(reader, head)
            if reader.newest_after(live.start, now + FUTURE_SKEW_SECONDS):
                return False
            with StoreIndex(reader, live) as index:
                view = StoreView(self, index, False)
                for seq in reversed(reader.conversation(conversation_id)):
                    if seq in live and view.indexed(seq) and not view.expired(seq, now):
                        self._remember(index, [seq])
                        return view.episode(seq).copy()
                return None

        try:
            found: Episode | bool | None = await self._log.read_index(run)
        except StaleIndexError as exc:
            self._recovered(exc, "finding the latest episode")
            return False
        self._note_counter()
        return found

    async def explain_in_store(
        self,
        query: str,
        k: int,
        *,
        intent: str,
        outcomes: set[str] | None,
        tags: set[str] | None,
        since: float | None,
        until: float | None,
        floor: float,
    ) -> Ranking | None:
        """The ranking read from the store's index (``None``: this log is read in process:
        deepcrew-ai's own layout, or an episode dated in the future, which the in-process
        index files under the episode before it)."""
        from ._index import StaleIndexError, StoreIndex

        await self._log.check_settings()
        head = await self._log.read_head()
        if head.legacy is not None:
            return None
        semantic = self.semantic
        query_vector: Any = None
        error: str | None = None
        if semantic is not None:
            self._log.embedder = head.embedder  # what a sync would have read
            semantic.check_embedder()
            query_vector, error = await semantic.query_vector(query)
        now = self._clock()

        def run(reader: Any) -> tuple[Any, Any, list[int]] | None:
            live = self._shown(reader, head)
            if reader.newest_after(live.start, now + FUTURE_SKEW_SECONDS):
                return None
            with StoreIndex(reader, live) as index:
                view = StoreView(self, index, head.uses is not None, reader.any_run(live))
                search: Any = None
                score: Any = None
                if query_vector is not None:
                    vectors = self._store_vectors(reader, index, live, len(query_vector))
                    if vectors is None:
                        return None  # this store keeps no vectors: they are read in process
                    from ._vectors import hybrid_rules

                    search, score = hybrid_rules(
                        index,
                        vectors,
                        query,
                        query_vector,
                        now=now,
                        intent=intent,
                        half_life_days=self._half_life,
                        similarity_floor=semantic.similarity_floor,
                        min_similarity=semantic.min_similarity,
                        since=since,
                        floor=floor,
                    )
                found, under = keyword_ranking(
                    view,
                    index,
                    query,
                    k,
                    now=now,
                    intent=intent,
                    half_life_days=self._half_life,
                    outcomes=outcomes,
                    tags=tags,
                    since=since,
                    until=until,
                    floor=floor,
                    search=search,
                    score=score,
                )
                self._remember(index, [seq for seq, _ in found])
                self._bad_grades |= index.bad_grades
                return found, under, reader.corrupt(live)

        try:
            result = await self._read(head, run, kept=query_vector is None)
        except StaleIndexError as exc:
            self._recovered(exc, "recalling")
            return None
        self._note_counter()
        self._note_grades()
        if result is None:
            return None
        found, under, corrupt = result
        self._log.note_corrupt(corrupt)
        ranking = copied_ranking([scored for _, scored in found], floor, under)
        if semantic is not None:
            ranking.by = "hybrid" if query_vector is not None else "keywords-fallback"
            ranking.embedder_error = error
        return ranking

    async def _read(self, head: Any, run: Callable[[Any], T], *, kept: bool = True) -> T:
        """``run(reader)`` over what recalls kept of this namespace at this revision, in this
        thread, when that holds everything it asks for (no trip to the store); otherwise on
        the store's index, with what it reads kept for the next (see _store_cache.py).
        *kept*: whether what is kept may answer (a search by meaning reads vectors)."""
        from ._store_cache import CachingReader, Miss, cache_of

        cache = cache_of(self._provider) if head.revision is not None else None
        space = None if cache is None else cache.space(self._log.prefix, _token(head))
        if cache is None or space is None:
            return await self._log.read_index(run)
        if kept:
            try:
                caching = CachingReader(None, cache, space)
                result = run(caching)
                caching.keep()
                return result
            except Miss:
                # read the store (what the search did so far is done again there)
                if space.misses >= 0:
                    space.misses += 1
        # A second search at this revision that needs the store: read the namespace whole,
        # when it is small enough, so that the next questions, asked before or not, need it
        # no more (a process that recalls once pays for no more than its question).
        whole = kept and space.misses >= _WHOLE_AFTER

        def fill(reader: Any) -> tuple[T, CachingReader]:
            # A store that tells its snapshot's revision (SQLite): what is kept is used only
            # when no write came between the head and the snapshot.
            same = getattr(reader, "revision", head.revision) == head.revision
            caching = CachingReader(reader, cache, space if same else None)
            if whole and same:
                caching.load()
            return run(caching), caching

        result, caching = await self._log.read_index(fill)
        caching.keep()
        return result

    def _store_vectors(self, reader: Any, index: Any, live: range, dimension: int) -> Any:
        """The vectors of the store's index this memory may use, for one search (``None``:
        the store keeps none). Only the log's embedder's, and only those it made from an
        episode's current text, as in process (see Semantic.apply)."""
        from ._embed import decode_identity, decode_vector, fingerprint
        from ._vectors import StoreVectors

        semantic = self.semantic
        vectors = reader.vectors() if hasattr(reader, "vectors") else None
        if vectors is None or semantic is None:
            return None
        identity = decode_identity(self._log.embedder)
        if identity is None or identity[0] != semantic.embedder.name:
            dimension = 0  # none of the stored vectors can be ours
        elif identity[1] != dimension:
            dimension = 0  # (the query then failed already: see dimension_problem)

        def usable(seq: int, raw: str) -> Any:
            decoded = decode_vector(raw)
            if seq not in index or decoded is None:
                return None
            return semantic.usable_vector(decoded, index.episode(seq), identity)

        mark = fingerprint(semantic.embedder.name, dimension)
        return StoreVectors(vectors, mark, dimension, live, semantic._background, usable)

    async def page_in_store(self, limit: int, offset: int, max_age: float | None) -> Any:
        """page() read from the store's index (``None``: read the log in process). *max_age*
        in seconds."""
        import math

        from ._index import StaleIndexError, StoreIndex
        from ._listing import Page

        head = await self._log.read_head()
        if head.legacy is not None:
            return None
        now = self._clock()
        oldest = -math.inf if max_age is None else now - max_age

        def run(reader: Any) -> Page | None:
            live = self._shown(reader, head)
            if reader.newest_after(live.start, now + FUTURE_SKEW_SECONDS):
                return None
            found = reader.newest(live, now, oldest, limit, offset)
            if found is None:
                return None  # this store lists from the log
            seqs, total = found
            with StoreIndex(reader, live) as index:
                self._remember(index, seqs)
                return Page([index.episode(s).copy() for s in seqs], total, offset)

        try:
            listed: Page | None = await self._log.read_index(run)
        except StaleIndexError as exc:
            self._recovered(exc, "listing")
            return None
        self._note_counter()
        return listed

    async def grades_in_store(self, episode_id: str) -> list[Grade] | None:
        """grades() of one episode read from the store's index (``None``: read the log)."""
        from ._index import StaleIndexError

        head = await self._log.read_head()
        if head.legacy is not None:
            return None

        def run(reader: Any) -> tuple[list[str], list[str]]:
            live = self._shown(reader, head)
            seqs = [s for s in reader.with_id(episode_id) if s in live]
            stamps = [f.timestamp for f in reader.facts(seqs).values()]
            return reader.grades(episode_id), stamps

        try:
            records, stamps = await self._log.read_index(run)
        except StaleIndexError as exc:
            self._recovered(exc, "reading its grades")
            return None
        self._note_counter()
        grades = self._log.decode_grades(records)
        # As _applies: the grades of the episode shown, or every one when none is shown.
        return [g for g in grades if not stamps or not g.stamp or g.stamp == stamps[-1]]


def _token(head: Any) -> tuple[Any, ...]:
    """What names the state of a namespace that recalls read: the store's revision and the
    log's head as read with it (counters, change token, ring, embedder)."""
    return (
        head.revision,
        head.last,
        head.raw_seq,
        head.gen,
        head.raw_grades,
        head.grades,
        head.uses,
        head.raw_ring,
        head.ring,
        head.embedder,
    )


class StoreView:
    """The ranking rules' view of a store's index, for one search (see _index.py)."""

    __slots__ = ("_index", "_past", "_runs", "_used", "reinforce")

    def __init__(self, reads: StoreReads, index: Any, used: bool, runs: bool = True) -> None:
        self._past = reads._past
        self._index = index
        self._used = used
        self._runs = runs
        self.reinforce = reads._reinforce

    def any_uses(self) -> bool:
        return self._used

    def any_runs(self) -> bool:
        return self._runs  # a run in view (of one iteration or more: exact either way)

    def uses(self, seq: int) -> int:
        found: int = self._index.uses(seq)
        return found

    def recorded(self, seq: int) -> float:
        when: float = self._index.when(seq)
        return when

    def run(self, key: str) -> list[int]:
        seqs: list[int] = self._index.run(key)
        return seqs

    def indexed(self, seq: int) -> bool:
        return seq in self._index

    def episode(self, seq: int) -> Episode:
        found: Episode = self._index.episode(seq)
        return found

    def expired(self, seq: int, now: float) -> bool:
        entry = self._index.facts(seq)
        return entry is not None and self._past(entry.facts.forget_at, entry.facts.when, now)

    def outcome(self, seq: int) -> str:
        outcome: str = self._index.facts(seq).graded_as[0]
        return outcome

    def tags(self, seq: int) -> frozenset[str]:
        import json

        return frozenset(json.loads(self._index.facts(seq).facts.tags))
