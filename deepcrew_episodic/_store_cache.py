"""What recalls read from a store's index, kept between recalls under one byte budget.

A recall from the store's index (see _index.py) reads the counts of the query's terms, chunks of
their postings, the facts of the episodes it scores, their grades and use counts, and the
records of the episodes it returns. A process that recalls again (an agent recalling before
each run) would read most of that again. :class:`RecallCache` keeps it, per provider: every
namespace and every memory on the provider share one budget (the provider's
``recall_cache_bytes``), so a worker serving thousands of namespaces holds at most that much.

What is kept is valid for one revision of a namespace: the store's own revision (SQLite: the
database's ``data_version`` and this connection's changes; Redis: a token every index script
sets anew), read in the same round trip as the log's head, and the head's counters and change
token themselves. Anything else and the namespace starts over empty. So a record, a grade, a
use, a forget, in this process or in another, and a write behind the library's back that the
store can see (raw SQL on the file), are seen by the next recall.

A recall first runs its search on what is kept, in this thread, without a trip to the store;
the first thing missing (:class:`Miss`) sends it to the store, where it runs again with
:class:`CachingReader` in front of the store's reader: it answers what is kept and records what
the store returns, which is then kept (:meth:`CachingReader.keep`), the oldest entries of the
least recently used namespaces going first when the budget would be exceeded. The search
itself is the same code over the same values either way, so the answers are the same.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import operator
import os
import threading
import weakref
from array import array
from collections import Counter, OrderedDict
from collections.abc import Callable, Collection, Hashable, Sequence
from typing import Any

from ._episode import Episode
from ._index import Facts, Whole
from ._recall import SizedMatches

__all__ = ["DEFAULT_BYTES", "CachingReader", "Miss", "RecallCache", "cache_of"]

DEFAULT_BYTES = 32 << 20

# What one kept value costs, roughly, in bytes (Python objects, counted the same way
# everywhere: the budget is enforced on these estimates).
_ROW = 20  # one posting: a time and a seq in two arrays
_ENTRY = 80  # one entry of a dict of ints
_BASE = 200  # a kept entry's own key, tuple and bookkeeping
_SIZED = 24  # one episode of a sized_matches answer: three int64s


class Miss(Exception):
    """What a search asked for is not kept: read the store."""


class Space:
    """What is kept of one namespace, for one revision of it."""

    __slots__ = ("bytes", "data", "misses", "prefix", "token")

    def __init__(self, prefix: str, token: Hashable) -> None:
        self.prefix = prefix
        self.token = token
        # How many searches found something missing here (see CachingReader.load); -1: the
        # store cannot hand this namespace over whole, or it would not fit.
        self.misses = 0
        # key -> (value, its size), oldest first. Read without the lock (one dict read under
        # the interpreter's lock); values are never changed once kept, only replaced.
        self.data: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self.bytes = 0


class RecallCache:
    """The byte-bounded cache of one provider (see the module doc)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0  # what is kept, as estimated: never above max_bytes
        self._spaces: OrderedDict[str, Space] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()
        _CACHES_MADE.add(self)

    def space(self, prefix: str, token: Hashable) -> Space | None:
        """What is kept of the namespace *prefix* at revision *token* (emptied when it was
        kept for another revision); ``None`` when this cache keeps nothing."""
        if self.max_bytes <= 0:
            return None
        with self._lock:
            found = self._spaces.get(prefix)
            if found is not None and found.token == token:
                self._spaces.move_to_end(prefix)
                return found
            if found is not None:
                self._drop(found)
            space = self._spaces[prefix] = Space(prefix, token)
            return space

    def keep(self, space: Space, added: dict[Hashable, tuple[Any, int]]) -> None:
        """Keep *added* in *space*, then evict until the budget holds. A single value above a
        quarter of the budget is not kept (it would evict everything else)."""
        if not added:
            return
        with self._lock:
            if self._spaces.get(space.prefix) is not space:
                return  # replaced by another revision meanwhile: this one is not kept
            data = space.data
            for key, item in added.items():
                size = item[1]
                if size * 4 > self.max_bytes:
                    continue
                old = data.pop(key, None)
                if old is not None:
                    space.bytes -= old[1]
                    self.bytes -= old[1]
                data[key] = item
                space.bytes += size
                self.bytes += size
            self._spaces.move_to_end(space.prefix)
            self._evict(space)

    def clear(self) -> None:
        with self._lock:
            for space in list(self._spaces.values()):
                self._drop(space)

    def _evict(self, current: Space) -> None:
        # The least recently used namespaces first (the one just read is the most recent),
        # and in each the entries kept first.
        spaces = self._spaces
        while self.bytes > self.max_bytes and spaces:
            space = next(iter(spaces.values()))
            if not space.data:
                if space is current:
                    break  # (the others come after it only when it is alone, and empty)
                del spaces[space.prefix]
                continue
            _, (_, size) = space.data.popitem(last=False)
            space.bytes -= size
            self.bytes -= size

    def _drop(self, space: Space) -> None:
        self.bytes -= space.bytes
        space.data = OrderedDict()
        space.bytes = 0
        self._spaces.pop(space.prefix, None)

    def _forked(self) -> None:
        self._lock = threading.Lock()


_CACHES: weakref.WeakKeyDictionary[Any, RecallCache] = weakref.WeakKeyDictionary()
_CACHES_MADE: weakref.WeakSet[RecallCache] = weakref.WeakSet()
_REGISTRY = threading.Lock()


def cache_of(provider: Any) -> RecallCache | None:
    """The cache of *provider*, made on first use with its ``recall_cache_bytes``
    (``None``: it keeps nothing)."""
    found = _CACHES.get(provider)
    if found is None:
        size = getattr(provider, "recall_cache_bytes", DEFAULT_BYTES)
        if not isinstance(size, int) or size <= 0:
            return None
        with _REGISTRY:
            found = _CACHES.get(provider)
            if found is None:
                try:
                    found = _CACHES[provider] = RecallCache(size)
                except TypeError:
                    return None  # a provider that cannot be weakly referenced keeps nothing
    return found if found.max_bytes > 0 else None


def _after_fork() -> None:
    # A lock held by a thread of the parent would never be released in the child.
    global _REGISTRY
    _REGISTRY = threading.Lock()
    for cache in list(_CACHES_MADE):
        cache._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


class CachingReader:
    """An :class:`~deepcrew_episodic._index.IndexReader` that answers from *space* what is
    kept there, and asks *reader* the rest (``None``: raises :class:`Miss` instead), noting
    what it returned to keep it afterwards (:meth:`keep`).

    Keys of what is kept: ``("n",)`` the newest seq; ``("c", term)`` a term's counts by length
    class; ``("p", term, size)`` a class's postings read so far, newest first, and whether they
    are all; ``("P", term, size)`` all of them, oldest first (see :meth:`whole`); ``("f", seq)`` an episode's facts and the query terms they are known for
    (``None``: all of its terms); ``("g", id)`` an id's grade records; ``("u", seq)`` a use
    count; ``("d", seq)`` the decoded record; ``("m", terms)`` the counting of a long scan;
    ``("r", run)`` a run's seqs; ``("ar", live)``, ``("x", live)`` whether a run is in view,
    the undecodable seqs in view; ``("na", start)`` the earliest time after which no episode
    from *start* on ranks (what ``newest_after`` answered ``False`` for); ``("mh", (terms,
    term, size))`` the most of *terms* an episode of a class holds; ``("W",)`` the namespace
    read whole (see :meth:`load`).
    """

    def __init__(self, reader: Any | None, cache: RecallCache, space: Space | None) -> None:
        self._reader = reader
        self._cache = cache
        self._space = space
        self._data: OrderedDict[Hashable, tuple[Any, int]] = (
            space.data if space is not None else OrderedDict()
        )
        self._added: dict[Hashable, tuple[Any, int]] = {}
        self._query: frozenset[str] = frozenset()
        # A store whose facts carry every term of their episode (Redis) rather than the
        # query's only (SQLite).
        self._every_term = bool(getattr(reader, "facts_hold_every_term", False))
        # The whole namespace, when it was read in one go (see load): it answers every read
        # it holds an answer for, the others go on as without it.
        found = self._data.get(_WHOLE)
        self._whole: _Loaded | None = found[0] if found is not None else None

    def load(self) -> None:
        """Read the whole namespace from the store, when it has the optional
        ``whole_namespace`` read and the namespace takes at most a quarter of the budget
        (what keep() keeps as one value): every question is then answered from memory."""
        read = getattr(self._reader, "whole_namespace", None)
        space = self._space
        if read is None or space is None or self._whole is not None:
            return
        whole = read(self._cache.max_bytes // 4 // _PER_EPISODE)
        loaded = None if whole is None else _Loaded(whole)
        if loaded is None or loaded.size * 4 > self._cache.max_bytes:
            space.misses = -1  # not tried again at this revision
            return
        self._whole = loaded
        self._put(_WHOLE, loaded, loaded.size)

    def keep(self) -> None:
        """Keep what the store returned to this reader (after a search that succeeded)."""
        if self._space is not None and self._added:
            self._cache.keep(self._space, self._added)
        self._added = {}

    # --- machinery ------------------------------------------------------------------------

    def _get(self, key: Hashable) -> tuple[Any, int] | None:
        found = self._added.get(key)
        return found if found is not None else self._data.get(key)

    def _put(self, key: Hashable, value: Any, size: int) -> None:
        if self._space is not None:
            self._added[key] = (value, size + _BASE)

    def _store(self) -> Any:
        if self._reader is None:
            raise Miss
        return self._reader

    # --- IndexReader --------------------------------------------------------------------

    def newest_seq(self) -> int:
        if self._whole is not None:
            return self._whole.newest
        found = self._get(("n",))
        if found is not None:
            newest: int = found[0]
            return newest
        newest = self._store().newest_seq()
        self._put(("n",), newest, 0)
        return newest

    def set_query(self, terms: Collection[str]) -> None:
        self._query = frozenset(terms)
        if self._reader is not None:
            self._reader.set_query(terms)

    def any_run(self, live: range) -> bool:
        if self._whole is not None:
            return self._whole.any_run(live)
        key = ("ar", live.start, live.stop)
        found = self._get(key)
        if found is not None:
            hit: bool = found[0]
            return hit
        hit = bool(self._store().any_run(live))
        self._put(key, hit, 0)
        return hit

    def newest_after(self, start: int, when: float) -> bool:
        if self._whole is not None:
            return self._whole.newest_after(start, when)
        key = ("na", start)
        found = self._get(key)
        if found is not None and when >= found[0]:
            return False  # nothing from start on ranks after an earlier time, nor after this
        later = bool(self._store().newest_after(start, when))
        if not later and (found is None or when < found[0]):
            self._put(key, when, 0)
        return later

    def corrupt(self, live: range) -> list[int]:
        if self._whole is not None:
            return self._whole.corrupt(live)
        key = ("x", live.start, live.stop)
        found = self._get(key)
        if found is not None:
            return list(found[0])
        seqs = list(self._store().corrupt(live))
        self._put(key, tuple(seqs), _ENTRY * len(seqs))
        return seqs

    def counts(self, terms: Sequence[str]) -> dict[str, dict[int, int]]:
        result: dict[str, dict[int, int]] = {}
        if self._whole is not None:
            counted = self._whole.counts
            for term in terms:
                sizes = counted.get(term)
                if sizes:
                    result[term] = dict(sizes)
            return result
        missing = []
        for term in terms:
            found = self._get(("c", term))
            if found is None:
                missing.append(term)
            elif found[0]:
                result[term] = dict(found[0])
        if missing:
            read = self._store().counts(missing)
            for term in missing:
                sizes = read.get(term, {})
                self._put(("c", term), dict(sizes), len(term) + _ENTRY * len(sizes))
                if sizes:
                    result[term] = dict(sizes)
        return result

    def postings(
        self, term: str, size: int, limit: int, before: tuple[float, int] | None
    ) -> list[tuple[float, int]]:
        if self._whole is not None:
            return self._whole.postings(term, size, limit, before)
        key = ("p", term, size)
        found = self._get(key)
        # Kept as two arrays (16 bytes a row, against 120 as a list of tuples), newest first.
        whens, seqs, whole = found[0] if found is not None else (_NO_WHENS, _NO_SEQS, False)
        at = 0
        if before is not None:
            at = _after(whens, seqs, before)
        if at >= 0 and (whole or at + limit <= len(seqs)):
            return list(zip(whens[at : at + limit], seqs[at : at + limit], strict=True))
        got = list(self._store().postings(term, size, limit, before))
        if at >= 0 and (at + len(got) > len(seqs) or len(got) < limit):
            # What is kept up to *before*, then what follows it: one run of rows.
            more_whens = whens[:at] + array("d", [r[0] for r in got])
            more_seqs = seqs[:at] + array("q", [r[1] for r in got])
            rows = (more_whens, more_seqs, len(got) < limit)
            self._put(key, rows, len(term) + _ROW * len(more_seqs))
        return got

    def whole(self, term: str, size: int) -> tuple[array[float], array[int]] | None:
        """All the postings of one length class of *term*, oldest first, when every one of
        them is kept and this reader asks the store nothing (``None`` otherwise): the search
        then reads them as it reads the in-process index's, with nothing in between."""
        if self._whole is not None:
            return self._whole.whole(term, size)
        if self._reader is not None:
            return None  # (reading the store, the search fetches facts along the postings)
        found = self._get(("P", term, size))
        if found is not None:
            rows: tuple[array[float], array[int]] = found[0]
            return rows
        kept = self._get(("p", term, size))
        if kept is None or not kept[0][2]:
            return None
        whens, seqs, _ = kept[0]
        rows = (whens[::-1], seqs[::-1])
        self._put(("P", term, size), rows, len(term) + _ROW * len(seqs))
        return rows

    def matches(self, terms: Sequence[str]) -> Counter[int]:
        if self._whole is not None:
            return self._whole.matches(terms)
        key = ("m", tuple(terms))
        found = self._get(key)
        if found is not None:
            kept: Counter[int] = found[0]
            return kept
        counted: Counter[int] = self._store().matches(terms)
        self._put(key, counted, _ENTRY * len(counted))
        return counted  # never changed by the search (it reads it only)

    def sized_matches(self, terms: Sequence[str]) -> SizedMatches | None:
        """The reader's ``sized_matches`` (``None``: it has none, or cannot answer), kept like
        ``matches``."""
        key = ("ms", tuple(terms))
        found = self._get(key)
        if found is not None:
            kept: SizedMatches = found[0]
            return kept
        read = getattr(self._store(), "sized_matches", None)
        if read is None:
            return None
        counted: SizedMatches | None = read(terms)
        if counted is not None:
            self._put(key, counted, _SIZED * len(counted.seqs))
        return counted  # never changed by the search (it reads it only)

    def most_held(self, key: tuple[tuple[str, ...], str, int], most: Callable[[], int]) -> int:
        """The most of the terms *key[0]* an episode of the length class *key[2]* of the
        term *key[1]* holds: ``most()``, kept (a pass over every posting of the class)."""
        found = self._get(("mh", key))
        if found is not None:
            kept: int = found[0]
            return kept
        counted = most()
        self._put(("mh", key), counted, sum(map(len, key[0])) + len(key[1]))
        return counted

    def ranked(self, seqs: Sequence[int]) -> dict[int, tuple[float, str, str, int]] | None:
        """The reader's ``ranked`` (``None``: it has none); not kept (read for bounds)."""
        read = getattr(self._store(), "ranked", None)
        found: dict[int, tuple[float, str, str, int]] | None = None if read is None else read(seqs)
        return found

    def facts(self, seqs: Sequence[int]) -> dict[int, Facts]:
        result: dict[int, Facts] = {}
        if self._whole is not None:
            every = self._whole.facts
            for seq in seqs:
                facts = every.get(seq)
                if facts is not None:
                    result[seq] = facts
            return result
        missing: list[int] = []
        query = self._query
        for seq in seqs:
            found = self._get(("f", seq))
            if found is not None:
                facts, known = found[0]
                if known is None or query <= known:
                    if facts is not None:
                        result[seq] = facts
                    continue
            missing.append(seq)
        if missing:
            read = self._store().facts(missing)
            for seq in missing:
                facts = read.get(seq)
                if facts is not None:
                    result[seq] = facts
                self._put(("f", seq), *self._facts_kept(seq, facts))
        return result

    def held(self, live: range) -> tuple[dict[int, Any], dict[str, Any], dict[str, int]] | None:
        """The namespace read whole, as a search over *live* reads it (see _index.held;
        ``None``: not read whole)."""
        return None if self._whole is None else self._whole.held(live)

    @property
    def kept(self) -> Callable[[int], Facts | None] | None:
        """When this reader asks the store nothing: the facts of one episode, from what is
        kept (``None``: not indexed; raises :class:`Miss` when not kept)."""
        if self._whole is not None:
            return self._whole.facts.get
        return self._kept_facts if self._reader is None else None

    def _kept_facts(self, seq: int) -> Facts | None:
        found = self._get(("f", seq))
        if found is None:
            raise Miss
        facts, known = found[0]
        if known is not None and not self._query <= known:
            raise Miss
        kept: Facts | None = facts
        return kept

    def _facts_kept(self, seq: int, facts: Facts | None) -> tuple[Any, int]:
        if facts is None:
            return (None, None), 0  # not indexed, or undecodable: whatever the query
        if self._every_term:
            known: frozenset[str] | None = None
        else:
            # Facts carry the query's terms the episode holds: known for the query's terms,
            # and for those it was known for before.
            known = self._query
            old = self._get(("f", seq))
            if old is not None and old[0][0] is not None and old[0][1] is not None:
                known = known | old[0][1]
                facts = _with_terms(facts, facts.terms | old[0][0].terms)
        size = 400 + 100 * len(facts.terms) + 60 * len(known or ())
        size += len(facts.episode_id) + len(facts.timestamp) + len(facts.tags)
        size += len(facts.run) + len(facts.conversation)
        return (facts, known), size

    def grades(self, episode_id: str) -> list[str]:
        if self._whole is not None:
            held = self._whole.grades.get(episode_id)
            if held is not None:
                return list(held)
        key = ("g", episode_id)
        found = self._get(key)
        if found is not None:
            return list(found[0])
        records = list(self._store().grades(episode_id))
        self._put(key, tuple(records), len(episode_id) + sum(100 + len(r) for r in records))
        return records

    def records(self, seqs: Sequence[int]) -> dict[int, str]:
        if self._whole is not None:
            every = self._whole.records
            if all(seq in every for seq in seqs):
                return {seq: every[seq] for seq in seqs}
        found: dict[int, str] = self._store().records(seqs)
        return found

    def decoded(self, seq: int) -> Episode | None:
        """The record of *seq* decoded (``None``: not stored); raises ``ValueError`` when it
        does not decode. The episode kept is never handed out: callers copy it."""
        if self._whole is not None:
            held = self._whole.decoded.get(seq)
            if held is not None:
                return held
        key = ("d", seq)
        found = self._get(key)
        if found is not None:
            kept: Episode = found[0]
            return kept
        from ._log import decode_entry

        raw = self.records([seq]).get(seq)
        if raw is None:
            return None
        episode = decode_entry(raw)
        self._put(key, episode, 1000 + 2 * len(raw))
        return episode

    def uses(self, seqs: Sequence[int]) -> dict[int, int]:
        result: dict[int, int] = {}
        if self._whole is not None:
            used = self._whole.uses
            for seq in seqs:
                count = used.get(seq)
                if count:
                    result[seq] = count
            return result
        missing: list[int] = []
        for seq in seqs:
            found = self._get(("u", seq))
            if found is None:
                missing.append(seq)
            elif found[0]:
                result[seq] = found[0]
        if missing:
            read = self._store().uses(missing)
            for seq in missing:
                count = read.get(seq, 0)
                self._put(("u", seq), count, 0)
                if count:
                    result[seq] = count
        return result

    def run(self, run: str) -> list[int]:
        if self._whole is not None:
            return list(self._whole.runs.get(run, ()))
        key = ("r", run)
        found = self._get(key)
        if found is not None:
            return list(found[0])
        seqs = list(self._store().run(run))
        self._put(key, tuple(seqs), len(run) + _ENTRY * len(seqs))
        return seqs

    def vectors(self) -> Any:
        reader = self._store()
        return reader.vectors() if hasattr(reader, "vectors") else None


_NO_WHENS = array("d")
_NO_SEQS = array("q")
_WHOLE = ("W",)
_MISSING: Any = object()
# How many views of a namespace read whole (memories showing more or less of its ring) are
# kept ready for searches at once; what each holds is counted in the namespace's size once
# (the views of one namespace share its facts, postings and records).
_VIEWS = 2
# What one episode of a namespace read whole costs at most, roughly (its facts, postings,
# record and their share of the rest): a namespace of more episodes than a quarter of the
# budget allows at this rate is not read whole.
_PER_EPISODE = 7000


class _Loaded:
    """A namespace read whole (:class:`~deepcrew_episodic._index.Whole`), with what answers
    each read made from it once; every answer is the one the store's reader gives."""

    __slots__ = (
        "_by_term",
        "_corrupt",
        "_held",
        "_latest",
        "_postings",
        "_prepared",
        "_run_seqs",
        "_seqs",
        "_source",
        "counts",
        "decoded",
        "facts",
        "grades",
        "newest",
        "records",
        "runs",
        "size",
        "uses",
    )

    def __init__(self, whole: Whole) -> None:
        # live range -> what searches over it read (see held); a few views at most
        self._held: dict[tuple[int, int], Any] = {}
        self._prepared: Any = _MISSING  # (postings, counts) as searches read them
        self.newest = whole.newest
        self.counts = whole.counts
        self._postings = whole.postings
        self._by_term: dict[str, list[array[int]]] = {}
        for (term, _), rows in whole.postings.items():
            self._by_term.setdefault(term, []).append(rows[1])
        self.facts = whole.facts
        self.grades = whole.grades
        self.uses = whole.uses
        # The records decoded once (the search decodes those it returns): only those that
        # do not decode are kept as they are, for decoded() to fail on as it does on others.
        from ._log import decode_entry

        self.decoded: dict[int, Episode] = {}
        self.records: dict[int, str] = {}
        for seq, raw in whole.records.items():
            try:
                self.decoded[seq] = decode_entry(raw)
            except ValueError:
                self.records[seq] = raw
        # What held() reads (the records decoded above: not kept as stored as well).
        self._source = dataclasses.replace(whole, records={})
        episodes = whole.episodes
        self._seqs = [e[0] for e in episodes]
        # _latest[i]: the latest time an episode from the i-th on ranks by
        latest = [-math.inf] * (len(episodes) + 1)
        for i in range(len(episodes) - 1, -1, -1):
            latest[i] = max(latest[i + 1], episodes[i][1])
        self._latest = latest
        self._corrupt = [e[0] for e in episodes if e[3]]
        runs: dict[str, list[int]] = {}
        for seq, _, run, _ in episodes:
            if run:
                runs.setdefault(run, []).append(seq)
        self.runs = runs
        self._run_seqs = [e[0] for e in episodes if e[2]]
        size = _ENTRY * len(self.uses) + sum(
            len(t) + _ENTRY * len(c) for t, c in self.counts.items()
        )
        size += sum(len(t) + 100 + _ROW * len(rows[1]) for (t, _), rows in self._postings.items())
        for facts in self.facts.values():
            size += 1150 + 150 * len(facts.terms) + len(facts.episode_id) + len(facts.timestamp)
            size += len(facts.tags) + len(facts.run) + len(facts.conversation)
        size += sum(1000 + 2 * len(raw) for raw in whole.records.values())
        size += sum(100 + len(k) + sum(100 + len(r) for r in v) for k, v in self.grades.items())
        size += 120 * len(episodes) + sum(len(run) + _ENTRY * len(s) for run, s in runs.items())
        # What held() makes of it: the buckets once, the entries for each view kept
        size += _VIEWS * 300 * len(self.facts) + 300 * len(self.counts) + 100 * len(self._postings)
        self.size = size

    def whole(self, term: str, size: int) -> tuple[array[float], array[int]]:
        return self._postings.get((term, size), (_NO_WHENS, _NO_SEQS))

    def held(self, live: range) -> tuple[dict[int, Any], dict[str, Any], dict[str, int]] | None:
        key = (live.start, live.stop)
        from ._index import held_entries, held_postings

        if self._prepared is _MISSING:
            self._prepared = held_postings(self._source)
        prepared = self._prepared
        if prepared is None:
            return None
        entries = self._held.get(key, _MISSING)
        if entries is _MISSING:
            entries = held_entries(self._source, self.decoded, live)
            if len(self._held) >= _VIEWS:
                self._held.clear()  # (memories of as many ring sizes on one namespace)
            self._held[key] = entries
        return None if entries is None else (entries, *prepared)

    def postings(
        self, term: str, size: int, limit: int, before: tuple[float, int] | None
    ) -> list[tuple[float, int]]:
        whens, seqs = self.whole(term, size)
        end = len(seqs)  # the rows before *before*, oldest first, end where it would be
        if before is not None:
            end = bisect.bisect_left(range(end), before, key=lambda i: (whens[i], seqs[i]))
        start = max(0, end - limit)
        return [(whens[i], seqs[i]) for i in range(end - 1, start - 1, -1)]

    def matches(self, terms: Sequence[str]) -> Counter[int]:
        counted: Counter[int] = Counter()
        for term in set(terms):
            for seqs in self._by_term.get(term, ()):
                counted.update(seqs)
        return counted

    def any_run(self, live: range) -> bool:
        at = bisect.bisect_left(self._run_seqs, live.start)
        return at < len(self._run_seqs) and self._run_seqs[at] < live.stop

    def newest_after(self, start: int, when: float) -> bool:
        return self._latest[bisect.bisect_left(self._seqs, start)] > when

    def corrupt(self, live: range) -> list[int]:
        found = self._corrupt
        return found[bisect.bisect_left(found, live.start) : bisect.bisect_left(found, live.stop)]


def _after(whens: array[float], seqs: array[int], before: tuple[float, int]) -> int:
    """Where the row just after *before* is among rows kept newest first (``-1``: *before*
    is not one of them)."""
    when, seq = before
    n = len(seqs)
    if n and seqs[-1] == seq and whens[-1] == when:
        return n  # the usual case: the search asks for what follows what it was given
    at = bisect.bisect_left(whens, -when, key=operator.neg)
    while at < n and whens[at] == when and seqs[at] > seq:
        at += 1
    return at + 1 if at < n and whens[at] == when and seqs[at] == seq else -1


def _with_terms(facts: Facts, terms: frozenset[str]) -> Facts:
    import dataclasses

    return dataclasses.replace(facts, terms=terms)
