"""The log as this process holds it: every episode's facts, grades, uses, runs and
conversations, kept up to date by each sync (``HeldLog.apply``), and the ranking rules' view of
it (``ProcessView``). A memory on a store that keeps the recall index reads this only when it
must read the whole log (see _store_reads.py for the other path)."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from ._episode import Episode, parse_time, run_key, stored_texts
from ._grade import Grade, graded
from ._log import Changes, EpisodeLog
from ._recall import RecallIndex, Scored
from ._unicode import search_form
from ._validate import strings

__all__ = ["FUTURE_SKEW_SECONDS", "UNDATED", "HeldLog", "Known", "ProcessView", "time_or_none"]

# A timestamp this far ahead of the clock is accepted (clocks differ); past it, it is refused on
# record and, when read from storage, replaced as an unusable one is.
FUTURE_SKEW_SECONDS = 86400.0
# The time of an episode with no usable timestamp and no dated episode before it: the oldest
# possible, so that it ranks last and expires under any max_age.
UNDATED = -math.inf


class VectorSink(Protocol):
    """What the held copy tells the semantic part (see _semantic.py) at each sync."""

    def reset(self) -> None: ...

    def remove(self, seq: int) -> None: ...

    def apply(self, changes: Changes) -> None: ...


@dataclass(frozen=True, slots=True)
class Known:
    """What the read paths need of one cached episode."""

    id: str
    forget_at: float | None
    recorded: float  # POSIX seconds; see HeldLog.apply for an unusable timestamp
    dated: bool  # the episode's own timestamp was usable
    run_id: str = ""  # its run_key: the run and the phase
    conversation_id: str = ""


class HeldLog:
    """The materialised in-process copy of one log (episodes stay in the log's cache)."""

    def __init__(
        self,
        episodes: EpisodeLog,
        index: RecallIndex,
        clock: Callable[[], float],
        vectors: VectorSink | None = None,
    ) -> None:
        self._log = episodes
        self.index = index
        self._clock = clock
        self.vectors = vectors
        # What every read path needs of a cached episode, one record per sequence number.
        self.known: dict[int, Known] = {}
        self.ids: dict[str, int] = {}  # episode id -> seq (record() refuses an id stored)
        self.newest: tuple[int, float] | None = None  # the newest cached seq and its time
        # Grades by episode id, oldest first; grade number -> episode id (for sweeps).
        self.grades: dict[str, list[Grade]] = {}
        self.graded_by: dict[int, str] = {}
        self.uses: dict[int, int] = {}  # seq -> times used in a run
        self.runs: dict[str, list[int]] = {}  # run_key (run and phase) -> its seqs, in order
        self.conversations: dict[str, list[int]] = {}  # conversation_id -> its seqs, in order
        self.revision = 0  # bumped whenever a sync changed what this memory shows

    @property
    def max_episodes(self) -> int:
        """The log's ring size as this memory reads it."""
        return self._log.max

    async def sync(self) -> None:
        await self._log.sync(self.apply)

    def apply(self, changes: Changes) -> None:
        if (
            changes.reset
            or changes.added
            or changes.removed
            or changes.grades
            or changes.uses is not None
            or changes.vectors
        ):
            self.revision += 1
        vectors = self.vectors
        if changes.reset:
            self.index.reset()
            self.known.clear()
            self.ids.clear()
            self.newest = None
            self.grades.clear()
            self.graded_by.clear()
            self.runs.clear()
            self.conversations.clear()
            if vectors is not None:
                vectors.reset()
        for seq in changes.removed:
            self.index.remove(seq)
            if vectors is not None:
                vectors.remove(seq)
            gone = self.known.pop(seq, None)
            if gone is not None and self.ids.get(gone.id) == seq:
                del self.ids[gone.id]
            if gone is not None and gone.run_id:
                run = self.runs.get(gone.run_id, [])
                if seq in run:
                    run.remove(seq)
                if not run:
                    self.runs.pop(gone.run_id, None)
            if gone is not None and gone.conversation_id:
                turns = self.conversations.get(gone.conversation_id, [])
                if seq in turns:
                    turns.remove(seq)
                if not turns:
                    self.conversations.pop(gone.conversation_id, None)
        if changes.uses is not None:
            self.uses = changes.uses
        if vectors is not None and changes.vectors:
            vectors.apply(changes)
        regraded = self.add_grades(changes.grades) if changes.grades else set()
        if not changes.added:
            for episode_id in regraded:
                found = self.ids.get(episode_id)
                if found is not None:
                    seq = found
                    self.index.add(
                        seq, self.view(self._log.episode(seq)), when=self.known[seq].recorded
                    )
            return
        # An episode whose timestamp cannot be used (garbled, or in the future) takes the time
        # of the newest dated episode before it in the log: it was recorded after that one, so
        # it still ages and expires, and it never ranks as the newest for ever.
        now = self._clock()
        added = sorted(changes.added, key=lambda item: item[0])
        first = added[0][0]
        if self.newest is not None and self.newest[0] < first:
            previous = self.newest[1]  # the usual case: appended after everything known
        else:
            earlier = [s for s in self.known if s < first]
            previous = self.known[max(earlier)].recorded if earlier else UNDATED
        for seq, episode in added:
            recorded = time_or_none(episode.timestamp)
            dated = recorded is not None and recorded <= now + FUTURE_SKEW_SECONDS
            if not dated or recorded is None:
                recorded = previous
            previous = recorded
            self.index.add(seq, self.view(episode), when=recorded)
            self.ids[episode.id] = seq
            self.known[seq] = Known(
                episode.id,
                time_or_none(episode.forget_after),
                recorded,
                dated,
                run_key(episode),
                episode.conversation_id,
            )
            if run_key(episode):
                self.runs.setdefault(run_key(episode), []).append(seq)
            if episode.conversation_id:
                self.conversations.setdefault(episode.conversation_id, []).append(seq)
        if self.newest is None or added[-1][0] > self.newest[0]:
            self.newest = (added[-1][0], previous)
        fresh = {seq for seq, _ in added}
        for episode_id in regraded:
            again = self.ids.get(episode_id)
            if again is not None and again not in fresh:
                seq = again
                self.index.add(
                    seq, self.view(self._log.episode(seq)), when=self.known[seq].recorded
                )
        for run in self.runs.values():
            run.sort()
        for conversation in {ep.conversation_id for _, ep in added if ep.conversation_id}:
            self.conversations[conversation].sort()

    def add_grades(self, graded: list[tuple[int, Grade]]) -> set[str]:
        """Take in new grades (with their numbers); return the ids of the episodes they
        grade."""
        touched: set[str] = set()
        top = max(self.graded_by, default=0)
        for position, grade in graded:
            # Kept in grade-number order: a grade read late (its writer was between its two
            # steps at the last sync) still takes its place among the others.
            mine = self.grades.setdefault(grade.episode_id, [])
            if position < top:
                later = [n for n, i in self.graded_by.items() if i == grade.episode_id]
                mine.insert(len(mine) - sum(1 for n in later if n > position), grade)
            else:
                mine.append(grade)
            self.graded_by[position] = grade.episode_id
            top = max(top, position)
            touched.add(grade.episode_id)
        return touched

    def cached(self) -> Iterator[tuple[int, Episode]]:
        """The episodes held, oldest first, as recorded (:meth:`view` applies their grades)."""
        return self._log.cached()

    def episode(self, seq: int) -> Episode:
        """The episode held as *seq*, as recorded."""
        return self._log.episode(seq)

    def view(self, episode: Episode) -> Episode:
        """*episode* as its grades make it (see _grade.py)."""
        return graded(episode, self.grades.get(episode.id, ()))

    def text_of(self, episode: Episode) -> str:
        """Every text stored for *episode*, its own and its grades', each in its search form
        (one line each: a needle never spans two texts)."""
        grades = [g for g in self.grades.get(episode.id, ()) if g.applies_to(episode)]
        texts = [*stored_texts(episode), *(t for g in grades for t in stored_texts(g))]
        return "\n".join(search_form(t) for t in texts)

    def applies(self, grade: Grade) -> bool:
        seq = self.ids.get(grade.episode_id)
        return seq is None or grade.applies_to(self._log.episode(seq))

    def recorded(self, seq: int, episode: Episode) -> float:
        known = self.known.get(seq)
        if known is not None:
            return known.recorded
        when = time_or_none(episode.timestamp)
        return UNDATED if when is None else when

    def by_time(self, found: Iterable[Scored]) -> list[Scored]:
        """*found* in the order the log files its episodes: by the time each is filed under
        (see :meth:`apply`), then by sequence number; one this memory does not hold first."""

        def when(item: Scored) -> tuple[float, int]:
            seq = self.ids.get(item.episode.id)
            known = self.known.get(seq) if seq is not None else None
            return (
                (known.recorded, seq) if known is not None and seq is not None else (-math.inf, -1)
            )

        return sorted(found, key=when)

    async def count_uses(self, ids: str | Collection[str]) -> None:
        """See :meth:`EpisodicMemory.used`: one use of each episode of *ids* (checked) this
        memory holds (synced first); the others are ignored."""
        wanted = set(strings("ids", ids, one=True))
        await self.sync()
        seqs = sorted({self.ids[i] for i in wanted if i in self.ids})
        await self._log.count_use(seqs)

    async def everything(self) -> list[tuple[int, Episode]]:
        """Every episode the log keeps, oldest first: the cache (this memory's range, synced
        by the caller) and, when a larger ring keeps more, the episodes below it."""
        beyond, _ = await self._log.beyond_view()
        return [(seq, self.view(ep)) for seq, ep in [*beyond, *self._log.cached()]]


class ProcessView:
    """The ranking rules' view of the log this memory holds (see _ranking.py)."""

    __slots__ = ("_expired", "_held", "reinforce")

    def __init__(
        self, held: HeldLog, reinforce: bool, expired: Callable[[int, float], bool]
    ) -> None:
        self._held = held
        self._expired = expired
        self.reinforce = reinforce

    def any_uses(self) -> bool:
        return bool(self._held.uses)

    def any_runs(self) -> bool:
        return any(len(seqs) > 1 for seqs in self._held.runs.values())

    def uses(self, seq: int) -> int:
        return self._held.uses.get(seq, 0)

    def recorded(self, seq: int) -> float:
        return self._held.known[seq].recorded

    def run(self, key: str) -> list[int]:
        return self._held.runs.get(key, [])

    def indexed(self, seq: int) -> bool:
        return seq in self._held.index

    def episode(self, seq: int) -> Episode:
        return self._held.index.episode(seq)

    def expired(self, seq: int, now: float) -> bool:
        return self._expired(seq, now)

    def outcome(self, seq: int) -> str:
        return self._held.index.episode(seq).outcome

    def tags(self, seq: int) -> frozenset[str]:
        return frozenset(t.casefold() for t in self._held.index.episode(seq).tags)


def time_or_none(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None
