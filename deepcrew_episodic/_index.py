"""The recall index kept in the store: what a store holds of each episode, and the search over it.

A provider that declares ``recall_index`` (SQLite, Redis) keeps, beside the episode log and in
the same atomic step as each write, what ranking needs of every episode: its terms (the
postings, by length class and time), the facts the filters and retention look at, and its
grades. A fresh process then reads only what a query touches: the counts of the query's terms,
the newest postings of each term until nothing left could enter the top k, the facts of the
episodes it scores, and the records of the k it returns.

This module is the library's side of that contract, shared by every such provider:

* :func:`index_row` turns a stored record into what the store keeps of it (one function, so
  that every provider indexes the same terms with the same times);
* :class:`IndexReader` is what a provider hands the search: small synchronous reads, run in
  the provider's worker thread, never on the event loop;
* :class:`StoreIndex` is the search itself: :class:`~deepcrew_episodic._recall.Postings` over
  lazy mappings, so the store returns exactly the episodes, scores and parts the in-process
  index returns.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

from ._episode import Episode, parse_time, run_key
from ._grade import Grade, deciding, graded
from ._recall import (
    DEFAULT_FIELDS,
    LENGTH_CAP,
    RECENCY_WEIGHT,
    WEIGHTS,
    Postings,
    SizedMatches,
    episode_terms,
    rank_key,
)
from ._stale import StaleIndexError, index_read

__all__ = [
    "IndexReader",
    "IndexRow",
    "StaleIndexError",
    "StoreIndex",
    "Whole",
    "index_read",
    "index_row",
]

UNDATED = -math.inf


@dataclass(frozen=True, slots=True)
class IndexRow:
    """What a store keeps of one episode record, beside the record (``None`` fields: absent).

    ``when`` is the episode's own time (``None``: no usable timestamp; the store then files it
    under the time of the episode before it, as the in-process index does)."""

    episode_id: str
    timestamp: str
    when: float | None
    outcome: str
    source: str
    terms: tuple[str, ...]
    size: int
    tags: tuple[str, ...]
    forget_at: float | None
    run: str
    conversation: str

    def terms_json(self) -> str:
        return json.dumps(self.terms, ensure_ascii=False)

    def tags_json(self) -> str:
        return json.dumps(self.tags, ensure_ascii=False)


def index_row(raw: str) -> IndexRow | None:
    """What the store keeps of the stored record *raw* (``None``: it cannot be decoded, and
    every read path skips it). The terms are those of the default recall fields."""
    from ._log import decode_entry  # the one decoder of stored records

    try:
        episode = decode_entry(raw)
    except ValueError:
        return None
    found = sorted(episode_terms(episode, DEFAULT_FIELDS))
    return IndexRow(
        episode.id,
        episode.timestamp,
        _time_or_none(episode.timestamp),
        episode.outcome,
        episode.outcome_source,
        tuple(found),
        min(len(found), LENGTH_CAP),
        tuple(sorted({t.casefold() for t in episode.tags})),
        _time_or_none(episode.forget_after),
        run_key(episode),
        episode.conversation_id,
    )


def _time_or_none(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Facts:
    """What the store keeps of one episode, as read back (see :meth:`IndexReader.facts`)."""

    seq: int
    episode_id: str
    timestamp: str
    when: float  # the time it ranks and expires by (UNDATED: none known)
    outcome: str
    source: str
    size: int
    terms: frozenset[str]  # those of the query's terms it holds (what the search reads)
    tags: str  # its tags, case-folded, as a JSON list (decoded only for a tags filter)
    forget_at: float | None
    run: str
    conversation: str
    graded: int  # how many grade records name its id

    def __post_init__(self) -> None:
        # Read back from a store another program may have edited: a value of the wrong kind
        # is the index disagreeing with itself (a ValueError, which index_read makes a
        # StaleIndexError), not a KeyError or a TypeError deep inside a search.
        if not (
            type(self.seq) is int
            and type(self.size) is int
            and self.size >= 0
            and type(self.graded) is int
            and type(self.when) is float
            and (self.forget_at is None or type(self.forget_at) is float)
            and isinstance(self.timestamp, str)
            and isinstance(self.episode_id, str)
            and isinstance(self.outcome, str)
            and isinstance(self.source, str)
            and rank_key(self.outcome, self.source) in WEIGHTS["any"]
        ):
            raise ValueError(f"the facts of episode {self.seq!r} are not of their kind")


@dataclass(frozen=True, slots=True)
class Whole:
    """Everything a keyword search reads of one namespace, read in one go from a store (its
    reader's optional ``whole_namespace``), so that what recalls keep answers any question
    (see _store_cache.py). Each part is what the reader's own read of it returns.

    ``postings``: (term, length class) -> all its postings oldest first, as two arrays;
    ``episodes``: every indexed seq in order as ``(seq, recorded, run, corrupt)``, the
    undecodable ones included; ``facts``: those of the decodable ones, with *all* their terms;
    ``grades``: the grade records of every id an episode counts grades for; ``uses``: the
    non-zero use counts; ``records``: the stored records of the decodable episodes."""

    newest: int
    counts: dict[str, dict[int, int]]
    postings: dict[tuple[str, int], tuple[Any, Any]]
    facts: dict[int, Facts]
    episodes: list[tuple[int, float, str, bool]]
    grades: dict[str, tuple[str, ...]]
    uses: dict[int, int]
    records: dict[int, str]


class IndexReader(Protocol):
    """The reads a store answers for one namespace, synchronously, inside the provider's worker
    thread (so a search is one trip to it, whatever it reads)."""

    def newest_seq(self) -> int:
        """The newest sequence number the index holds (0: none)."""

    def set_query(self, terms: Collection[str]) -> None:
        """The query's terms: :meth:`facts` reports which of them each episode holds."""

    def any_run(self, live: range) -> bool:
        """Whether an episode in *live* belongs to a run."""

    def counts(self, terms: Sequence[str]) -> dict[str, dict[int, int]]:
        """term -> length class -> how many indexed episodes hold it (absent terms left out)."""

    def postings(
        self, term: str, size: int, limit: int, before: tuple[float, int] | None
    ) -> list[tuple[float, int]]:
        """Up to *limit* ``(when, seq)`` of the term's class, newest first, strictly before
        *before* in that order (``None``: from the newest)."""

    def matches(self, terms: Sequence[str]) -> Counter[int]:
        """seq -> how many of *terms* it holds, for every episode holding one."""

    def facts(self, seqs: Sequence[int]) -> dict[int, Facts]:
        """The facts of the indexed, decodable episodes among *seqs*."""

    def grades(self, episode_id: str) -> list[str]:
        """The stored grade records of *episode_id*, oldest first."""

    def records(self, seqs: Sequence[int]) -> dict[int, str]:
        """The stored records of *seqs* (the log's ``e:<seq>`` values)."""

    def uses(self, seqs: Sequence[int]) -> dict[int, int]:
        """How many times each of *seqs* was used (the log's ``u:<seq>`` counters)."""

    def run(self, run: str) -> list[int]:
        """The seqs of the episodes of *run* (a run_key), oldest first."""


class _Tail:
    """One length class of one term's postings, read from the newest end on demand.

    ``whens`` and ``seqs`` look like the in-process bucket's lists (oldest first, indexed
    from the end as the search reads them); rows are fetched in chunks that double, so a
    search that stops after a few dozen visits reads a few dozen rows."""

    __slots__ = ("_read", "_size", "_term", "at", "index", "n", "rows")

    def __init__(self, index: StoreIndex, term: str, size: int, n: int) -> None:
        self.index = index
        self._read = index.reader
        self.at = 0
        self._term, self._size = term, size
        self.n = n
        self.rows: list[tuple[float, int]] = []  # newest first

    # Made on each read rather than held: a column held by its tail would be a reference
    # cycle, left for the garbage collector after every search.
    @property
    def whens(self) -> _Column:
        return _Column(self, 0)

    @property
    def seqs(self) -> _Column:
        return _Column(self, 1)

    def load(self, i: int) -> None:
        """Make position *i* (oldest first) readable."""
        want = self.n - i  # rows needed from the newest end
        while len(self.rows) < want:
            chunk = max(64, len(self.rows))
            before = self.rows[-1] if self.rows else None
            got = self._read.postings(self._term, self._size, chunk, before)
            if not got:
                raise StaleIndexError(
                    f"the index counts {self.n} episodes under {self._term!r} but holds "
                    f"{len(self.rows)}"
                )
            self.rows.extend(got)


class _Whole:
    """One length class of one term's postings, all of them at hand (oldest first)."""

    __slots__ = ("seqs", "whens")

    def __init__(self, whens: Sequence[float], seqs: Sequence[int]) -> None:
        self.whens, self.seqs = whens, seqs


class _Column(Sequence[Any]):
    __slots__ = ("_of", "_tail")

    def __init__(self, tail: _Tail, of: int) -> None:
        self._tail, self._of = tail, of

    def __len__(self) -> int:
        return self._tail.n

    def __getitem__(self, i: Any) -> Any:
        tail = self._tail
        if isinstance(i, slice):
            start, stop, step = i.indices(tail.n)
            if start < stop:
                tail.load(start)
            return [tail.rows[tail.n - 1 - j][self._of] for j in range(start, stop, step)]
        if i < 0:
            i += tail.n
        if not 0 <= i < tail.n:
            raise IndexError(i)
        rows = tail.rows
        at = tail.n - 1 - i
        if at >= len(rows):
            tail.load(i)
        if self._of:
            tail.at = at  # the entry the search reads next is this one's (see _Entries)
            tail.index.cursor = tail
        return rows[at][self._of]

    def __iter__(self) -> Iterator[Any]:
        tail = self._tail
        if tail.n:
            tail.load(0)
        for row in reversed(tail.rows):
            yield row[self._of]


# How many entries a bucket's walk reads facts for in one trip.
_AHEAD = 48


@dataclass(slots=True)
class _StoreEntry:
    facts: Facts
    outcome: str  # rank_key of the graded outcome
    graded_as: tuple[str, str]  # the graded outcome and source
    grades: tuple[Grade, ...]
    _index: StoreIndex

    @property
    def terms(self) -> frozenset[str]:
        return self.facts.terms

    @property
    def size(self) -> int:
        return self.facts.size

    @property
    def when(self) -> float:
        return self.facts.when

    @property
    def episode(self) -> Episode:
        return self._index.episode(self.facts.seq)


class _HeldEntry:
    """An entry of a namespace read whole (see :func:`held`): what a :class:`_StoreEntry`
    holds, shared by every search at one revision, its episode made once."""

    __slots__ = (
        "_episode",
        "_record",
        "facts",
        "graded_as",
        "grades",
        "outcome",
        "size",
        "terms",
        "when",
    )

    def __init__(
        self,
        facts: Facts,
        outcome: str,
        graded_as: tuple[str, str],
        grades: tuple[Grade, ...],
        record: Episode,
    ) -> None:
        self.facts = facts
        self.outcome = outcome
        self.graded_as = graded_as
        self.grades = grades
        self.terms = facts.terms
        self.size = facts.size
        self.when = facts.when
        self._record = record
        self._episode: Episode | None = None

    @property
    def episode(self) -> Episode:
        found = self._episode
        if found is None:
            found = self._episode = graded(self._record, self.grades)
        return found


def held_postings(whole: Whole) -> tuple[dict[str, Any], dict[str, int]] | None:
    """Every term's postings and count of a namespace read whole, as a search reads them,
    in plain dicts (``None``: a count below zero or off its postings, which the search
    checks itself: it then reads *whole* as it reads a store)."""
    postings: dict[str, Any] = {}
    df: dict[str, int] = {}
    for term, sizes in whole.counts.items():
        if not sizes:
            continue
        buckets: dict[int, _Whole] = {}
        for s, n in sizes.items():
            if n < 0:
                return None
            rows = whole.postings.get((term, s))
            if n and (rows is None or len(rows[1]) != n):
                return None
            if n and rows is not None:
                buckets[s] = _Whole(*rows)
        postings[term] = buckets
        df[term] = sum(sizes.values())
    return postings, df


def held_entries(
    whole: Whole, decoded: Mapping[int, Episode], live: range
) -> dict[int, Any] | None:
    """The entries of the episodes in *live* of a namespace read whole (*decoded*: its
    records decoded), as a search reads them (``None``: an undecodable grade or record,
    which the search meets itself: it then reads *whole* as it reads a store)."""
    entries: dict[int, Any] = {}
    for seq, facts in whole.facts.items():
        if seq not in live:
            continue
        record = decoded.get(seq)
        if record is None:
            return None
        grades: tuple[Grade, ...] = ()
        outcome, source = facts.outcome, facts.source
        if facts.graded:
            records = whole.grades.get(facts.episode_id)
            bad: set[str] = set()
            if records is None:
                return None
            grades = tuple(_grades(records, bad))
            if bad:
                return None
            face = cast("Episode", _Face(facts.outcome, facts.source, facts.timestamp))
            grade = deciding(face, grades)
            if grade is not None:
                outcome, source = grade.reads_as
        entries[seq] = _HeldEntry(
            facts, rank_key(outcome, source), (outcome, source), grades, record
        )
    return entries


_UNREAD: Any = object()


class _Entries(Mapping[int, _StoreEntry]):
    """seq -> entry, read from the store the first time a search asks (and kept for the
    rest of that search)."""

    def __init__(self, index: StoreIndex) -> None:
        self._index = index
        self._got: dict[int, _StoreEntry | None] = {}
        # A reader that answers from what is kept, one episode at a time (see _store_cache).
        self._kept: Callable[[int], Facts | None] | None = getattr(index.reader, "kept", None)

    def _fetch(self, seq: int) -> _StoreEntry | None:
        got = self._got
        found = got.get(seq, _UNREAD)
        if found is not _UNREAD:
            return found  # type: ignore[no-any-return]
        if self._kept is not None:
            index = self._index
            facts = self._kept(seq)
            got[seq] = index.entry(facts) if facts is not None and seq in index.live else None
        else:
            wanted = [seq]
            tail = self._index.cursor
            if tail is not None and tail.at < len(tail.rows) and tail.rows[tail.at][1] == seq:
                # The search walks a bucket from its newest end: read the facts of the next
                # ones with this one, in one trip.
                wanted += [s for _, s in tail.rows[tail.at + 1 : tail.at + _AHEAD]]
            self.ahead(wanted)
        return got[seq]

    def ahead(self, seqs: Sequence[int]) -> None:
        """Read the entries of *seqs* not read yet, in one trip."""
        got = self._got
        wanted = [s for s in seqs if s not in got]
        if not wanted:
            return
        index = self._index
        found = index.reader.facts(wanted)
        for s in wanted:
            if s not in got:
                facts = found.get(s)
                live = facts is not None and s in index.live
                got[s] = index.entry(facts) if live and facts is not None else None

    def __getitem__(self, seq: int) -> _StoreEntry:
        found = self._fetch(seq)
        if found is None:
            raise KeyError(seq)
        return found

    def __contains__(self, seq: object) -> bool:
        return isinstance(seq, int) and self._fetch(seq) is not None

    def get(self, seq: int, default: Any = None) -> Any:
        found = self._got.get(seq, _UNREAD)
        if found is _UNREAD:
            found = self._fetch(seq)
        return default if found is None else found

    def __iter__(self) -> Iterator[int]:
        return iter([s for s, e in self._got.items() if e is not None])

    def __len__(self) -> int:
        return sum(1 for e in self._got.values() if e is not None)


class StoreIndex(Postings):
    """The search over a store's index for one query, inside the provider's worker thread.

    *live* is the range of sequence numbers the memory shows (its view of the ring): an
    episode outside it is indexed but never returned, exactly as the in-process index never
    holds it. Everything read is kept for the rest of this search only; nothing outlives it.
    """

    # A visit reads an episode's facts (a query, batched); counting reads bare seqs. So a
    # long scan switches to counting sooner than in process (see _recall.py).
    _count_ratio = 100

    def __init__(
        self,
        reader: IndexReader,
        live: range,
        *,
        recency_weight: float = RECENCY_WEIGHT,
    ) -> None:
        self.reader = reader
        self.live = live
        self.fields = DEFAULT_FIELDS
        self.length_cap = LENGTH_CAP
        self.recency_weight = recency_weight
        self._entries = cast("Mapping[int, Any]", _Entries(self))
        self._postings = {}
        self._df = {}
        self._episodes: dict[int, Episode] = {}
        self._uses: dict[int, int] = {}
        # Grade records that do not decode, as met: skipped here, counted by the caller.
        self.bad_grades: set[str] = set()
        self._query: frozenset[str] = frozenset()
        self.cursor: _Tail | None = None  # the bucket the search read a seq from last
        # terms -> how many of them each episode holds, and its length class, as read once.
        self._sized: dict[frozenset[str], SizedMatches] = {}
        self._counted: tuple[str, ...] = ()  # the terms the search counted (see _count)
        # A namespace read whole (see _store_cache.py): its entries and postings as plain
        # dicts, shared by the searches at this revision and never changed by one.
        found = getattr(reader, "held", None)
        shared = found(live) if found is not None else None
        self._held = shared is not None
        if shared is not None:
            self._entries, self._postings, self._df = shared

    def __enter__(self) -> StoreIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Drop what this search read. Its buckets and entries point back at the index:
        dropped here, they are freed at once instead of by the garbage collector, whose
        passes over a process holding a large cache would cost more than the search."""
        self._postings = {}
        self._df = {}
        self._entries = {}
        self._episodes = {}
        self.cursor = None

    def _prepare(self, q_terms: frozenset[str] | set[str]) -> None:
        if self._query != q_terms:
            self._query = frozenset(q_terms)
            self.reader.set_query(self._query)
            if not self._held:
                cast("_Entries", self._entries)._got.clear()
            self._episodes.clear()
        if self._held:
            return  # every term's postings are at hand already
        counts = self.reader.counts(sorted(t for t in q_terms if t not in self._postings))
        postings = cast("dict[str, Any]", self._postings)
        df = cast("dict[str, int]", self._df)
        whole = getattr(self.reader, "whole", None)
        for term, sizes in counts.items():
            if any(n < 0 for n in sizes.values()):
                raise StaleIndexError(f"the index counts fewer than no postings of {term!r}")
            buckets: dict[int, _Tail | _Whole] = {}
            for s, n in sizes.items():
                rows = whole(term, s) if n and whole is not None else None
                if rows is not None and len(rows[1]) == n:
                    buckets[s] = _Whole(*rows)
                elif n:
                    buckets[s] = _Tail(self, term, s, n)
            postings[term] = buckets
            df[term] = sum(sizes.values())

    def _count(self, ordered: Sequence[str]) -> Counter[int]:
        self._counted = tuple(ordered)
        sized = self._sized.get(frozenset(ordered))
        if sized is not None:  # the same postings, counted already (see _sized_count)
            return sized.counted()
        return self.reader.matches(ordered)

    def _most(self, term: str, size: int, counts: Counter[int], seqs: Sequence[int]) -> int:
        # A pass over every posting of the class: what the reader kept of it (the same
        # terms counted, at the same revision) answers without one.
        keep = getattr(self.reader, "most_held", None)
        if keep is None:
            return super()._most(term, size, counts, seqs)
        found: int = keep(
            (self._counted, term, size), lambda: Postings._most(self, term, size, counts, seqs)
        )
        return found

    def _ahead(self, seqs: Sequence[int]) -> None:
        if not self._held:
            cast("_Entries", self._entries).ahead(seqs)

    def _ranked(self, seqs: Sequence[int]) -> dict[int, tuple[float, str, bool]] | None:
        read = getattr(self.reader, "ranked", None)
        if read is None:
            return None
        live = self.live
        rows: dict[int, tuple[float, str, str, int]] = read([s for s in seqs if s in live])
        return {s: (r[0], rank_key(r[1], r[2]), r[3] > 0) for s, r in rows.items()}

    def _sized_count(self, ordered: Sequence[str]) -> SizedMatches | None:
        read = getattr(self.reader, "sized_matches", None)
        found: SizedMatches | None = None if read is None else read(ordered)
        if found is not None:
            self._sized[frozenset(ordered)] = found
        return found

    # --- what the memory's filters and ranking rules read ------------------------------------

    def entry(self, facts: Facts) -> _StoreEntry:
        grades: tuple[Grade, ...] = ()
        outcome, source = facts.outcome, facts.source
        if facts.graded:
            grades = tuple(_grades(self.reader.grades(facts.episode_id), self.bad_grades))
            face = cast("Episode", _Face(facts.outcome, facts.source, facts.timestamp))
            grade = deciding(face, grades)
            if grade is not None:
                outcome, source = grade.reads_as
        return _StoreEntry(facts, rank_key(outcome, source), (outcome, source), grades, self)

    def __contains__(self, seq: object) -> bool:
        return seq in self._entries

    def facts(self, seq: int) -> _StoreEntry | None:
        if self._held:
            found: Any = self._entries.get(seq)
            return cast("_StoreEntry | None", found)
        entries = cast("_Entries", self._entries)
        return entries._fetch(seq)

    def when(self, seq: int) -> float:
        when: float = self._entries[seq].when
        return when

    def episode(self, seq: int) -> Episode:
        """The episode *seq* as its grades make it (read once per search)."""
        found = self._episodes.get(seq)
        if found is None:
            try:
                episode = _decoded(self.reader, seq)
            except ValueError:
                raise StaleIndexError(f"episode {seq} no longer decodes") from None
            if episode is None:
                raise StaleIndexError(f"the index holds episode {seq}, the log does not")
            entry = self.facts(seq)
            grades = entry.grades if entry is not None else ()
            found = self._episodes[seq] = graded(episode, grades)
        return found

    def uses(self, seq: int) -> int:
        if seq not in self._uses:
            self._uses.update({seq: 0, **self.reader.uses([seq])})
        return self._uses[seq]

    def run(self, run: str) -> list[int]:
        return [s for s in self.reader.run(run) if s in self.live]


def _decoded(reader: IndexReader, seq: int) -> Episode | None:
    """The record of *seq* decoded (``None``: not stored), by the reader when it keeps
    decoded records (see _store_cache.py)."""
    decoded = getattr(reader, "decoded", None)
    if decoded is not None:
        found: Episode | None = decoded(seq)
        return found
    from ._log import decode_entry

    raw = reader.records([seq]).get(seq)
    return None if raw is None else decode_entry(raw)


@dataclass(frozen=True, slots=True)
class _Face:
    """The parts of an episode that decide which of its grades applies."""

    outcome: str
    outcome_source: str
    timestamp: str


def _grades(records: Sequence[str], bad: set[str]) -> Iterator[Grade]:
    for raw in records:
        try:
            yield Grade.from_json(raw)
        except ValueError:
            bad.add(raw)  # skipped, as a sync skips it; the memory logs and counts it
