"""The episode log: how episodes are laid out on a key/value provider.

Key layout for namespace ``ns`` (``N`` is ``ns`` with every character outside letters, digits
and ``_.-`` percent-encoded, so that ``N`` never holds a ``:`` and no namespace's keys start with
another's prefix; for the usual names ``N`` is ``ns`` itself)::

    episodic:N:__seq__       the newest sequence number (an atomic counter)
    episodic:N:e:<seq>       one episode as JSON, seq = 1, 2, 3, ...
    episodic:N:__gen__       a random token, replaced by every clear / forget / sweep / shrink
    episodic:N:__max__       the log's ring size: the largest ``max_episodes`` that recorded
    episodic:N:id:<hash>     the claim on an explicit episode id (see ``claim``)
    episodic:N:v:<seq>       the vector of episode <seq> (recall by meaning; see _embed.py)
    episodic:N:__embedder__  which embedder wrote the vectors: {"name", "dimension"}
    episodic:N:__grades__    the newest grade number (an atomic counter)
    episodic:N:g:<n>         one grade of an episode, given after it was recorded (JSON)
    episodic:N:u:<seq>       how many times episode <seq> was used in a run (a counter)
    episodic:N:__uses__      bumped by every use, so that readers know to read the counts
    episodic:N:uj:<n>        use n: the seqs whose counts it raised (the newest 1,000 kept)
    episodic:N:__base__      how many deepcrew-ai episodes our numbers start after (fixed)

An episode's key is written once and never again (only deleted): a grade is a record of its own,
applied on every read path, and a use is counted beside the episode, not in it.
    episodic:ns:__meta__     deepcrew-ai 0.6's ring index {"count", "next"} (read, never written)
    episodic:ns:<slot>       deepcrew-ai 0.6's episodes, slot = 0 .. count-1 (read in place)

A key belongs to a namespace only when the rest of it has one of these shapes, so ``clear()`` on
``a`` never touches ``a:b`` (whose keys ``episodic:a:b:...`` share the raw prefix).

Appending is ``increment(__seq__)`` then an atomic write that stores ``e:<seq>`` and deletes the
episode that falls out of the ring, decided on ``__max__`` as it stands at that moment
(``increment_and_write`` with ``read``). The ring only grows: a writer with a larger
``max_episodes`` raises ``__max__`` in the same step, and a writer with a smaller one evicts by
the larger, so no call deletes an episode that a memory with a larger ring still shows; only
:meth:`EpisodeLog.shrink` lowers it. Nothing is read-modified-written, so concurrent writers in
any number of processes never lose an episode, and a writer killed between the two steps leaves a
hole, never half an episode.

A log written by deepcrew-ai is adopted without moving anything: its episodes become sequence
numbers ``1..count`` in its oldest-first order, and our counter starts after them.

Readers keep a cache of decoded episodes and bring it up to date with one batch read of the
index keys plus one batch read of whatever is new, so recall costs a constant number of round
trips however large the log (or the store around it) is.

No counter is trusted over the records it counts. An append reads the record its new number
names in its own atomic step (``fresh``) and never overwrites one: a counter that is missing,
behind, garbled or past any real count is repaired from the records, only ever upwards. A reader
reads the record just past each counter with the counter (one that exists shows the counter
behind), reads again for a while a number taken but not yet written (a grade between its two
steps), and reads again the newest episode and grade it holds (one that changed shows the log
went back under the same change token: an older snapshot, a restored backup).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote, unquote

from ._embed import decode_identity, decode_vector
from ._episode import Episode
from ._exceptions import ConfigurationError, CorruptDataError, InvalidEpisodeError, StorageError
from ._grade import Grade
from ._mutex import Mutex
from ._redact import safe_message
from ._stale import StaleIndexError
from ._unicode import escape_hidden, is_hidden
from ._validate import integer
from .providers._base import Fresh, MemoryProvider, Then

log = logging.getLogger("deepcrew_episodic")

T = TypeVar("T")

_SAFE = re.compile(r"[A-Za-z0-9_.\-]+")
_ENTRY = re.compile(r"e:([0-9]+)")
_SLOT = re.compile(r"[0-9]+")
_CLAIM = re.compile(r"id:[0-9a-f]{32}")
_VECTOR = re.compile(r"v:([0-9]+)")
_GRADE = re.compile(r"g:([0-9]+)")
_USE = re.compile(r"u:([0-9]+)")
_JOURNAL_KEY = re.compile(r"uj:([0-9]+)")
_OWN = frozenset(
    {"__seq__", "__gen__", "__max__", "__embedder__", "__grades__", "__uses__", "__base__"}
)
_DIGITS = re.compile(r"[0-9]{1,18}")  # ASCII only: int() would also take "٣" or "²"
NAMESPACE_CHARS = 256
MAX_RING = 10**9  # max_episodes: far past what any store here can hold
# A key that is missing inside the live range is retried this long: its writer may still be
# between its increment and its write. After that it is a hole left by a dead writer.
HOLE_GRACE_SECONDS = 60.0


def validate_namespace(namespace: object) -> str:
    """Any text deepcrew-ai accepts ("support bot", "tenant/42", "agent:v2", "équipe"), except
    what cannot be shown or stored: empty, over 256 characters, control or invisible
    characters, invalid Unicode."""
    if not isinstance(namespace, str):
        raise ConfigurationError(f"namespace must be a string, not {type(namespace).__name__}")
    problem = ""
    if not namespace:
        problem = "it is empty"
    elif len(namespace) > NAMESPACE_CHARS:
        problem = f"it has {len(namespace)} characters (at most {NAMESPACE_CHARS})"
    else:
        bad = next((c for c in namespace if is_hidden(c) or c in "\n\r\u2028\u2029"), None)
        if bad is not None:
            problem = f"it holds the control or invisible character {bad!r}"
    if problem:
        raise ConfigurationError(f"invalid namespace {safe_message(namespace, 300)!r}: {problem}")
    return namespace


def encode_namespace(namespace: str) -> str:
    """*namespace* with every character outside letters, digits and ``_.-`` percent-encoded
    (UTF-8), so that it holds no ``:`` and no glob or hash-tag character."""
    if _SAFE.fullmatch(namespace):
        return namespace
    return quote(namespace, safe="_.-")


@dataclass(frozen=True)
class Legacy:
    """deepcrew-ai 0.6's ring index. Its oldest episode is at slot ``next % count``.

    *base* is how many of its episodes this library numbered ``1..base`` when it adopted the
    log (``__base__``); deepcrew-ai workers still writing it (a fleet half upgraded) add
    episodes past that, which are read as the positions ``base+1..count`` of its ring and
    cached under ``EXTRA + position``, never under a number of ours."""

    count: int
    next: int
    base: int | None = None

    @property
    def shared(self) -> int:
        """The positions ``1..shared`` numbered as our sequence numbers."""
        return self.count if self.base is None else min(self.base, self.count)

    def slot(self, seq: int) -> int:
        """The slot of ring position *seq* (1 = oldest)."""
        return (self.next + seq - 1) % self.count

    def extras(self) -> range:
        """The ring positions written by deepcrew-ai after the adoption."""
        return range(self.shared + 1, self.count + 1)


@dataclass(frozen=True)
class Head:
    last: int
    gen: str | None
    legacy: Legacy | None
    ring: int | None = None  # the log's ring size (__max__), when a writer recorded one
    raw_ring: str | None = None  # __max__ as stored, for a compare-and-set
    embedder: str | None = None  # __embedder__ as stored
    grades: int = 0  # __grades__: the newest grade number
    uses: str | None = None  # __uses__ as stored
    raw_seq: str | None = None  # __seq__ as stored
    raw_grades: str | None = None  # __grades__ as stored
    extra: tuple[str | None, ...] = ()  # the keys read_head was asked to read with the index
    revision: str | None = None  # the store's index revision, read with it (None: none told)


@dataclass
class Counters:
    """Tolerated failures, counted (each is also logged)."""

    corrupt_records: int = 0
    recovered_indexes: int = 0
    reflection_failures: int = 0
    recall_failures: int = 0
    record_failures: int = 0  # a run's episode could not be stored (the run went on)
    missing_records: int = 0  # a writer took a sequence number and never wrote it (it died)
    embedding_failures: int = 0  # an embedder call failed: stored without a vector / keywords
    # a span could not be described, started or ended (tracing's own fault)
    telemetry_failures: int = 0
    rewound_logs: int = 0  # the log went back under a reader (older snapshot, backup, flush)
    unsafe_settings: int = 0  # the store's settings can lose records (Redis allkeys-* eviction)
    grading_failures: int = 0  # a follow-up could not be read or its grade stored (run went on)


@dataclass
class Changes:
    """What a sync changed in the cache, for the recall index to follow."""

    reset: bool = False
    added: list[tuple[int, Episode]] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)
    # The stored vectors of added episodes, decoded: (fingerprint, text digest, unit vector).
    vectors: dict[int, tuple[str, str, Any]] = field(default_factory=dict)
    grades: list[tuple[int, Grade]] = field(default_factory=list)  # new grades, by number
    uses: dict[int, int] | None = None  # every use count, when one changed since the last sync


class EpisodeLog:
    """A ring buffer of episodes on a provider, with a read cache."""

    def __init__(self, provider: MemoryProvider, namespace: str, max_episodes: int) -> None:
        self.provider = provider
        self.namespace = validate_namespace(namespace)
        self.max = integer("max_episodes", max_episodes, minimum=1, maximum=MAX_RING)
        self.prefix = f"episodic:{encode_namespace(namespace)}:"
        # deepcrew-ai's keys use the namespace as given; read in place, never written.
        self.legacy_prefix = f"episodic:{namespace}:"
        self.seq_key = self.prefix + "__seq__"
        self.gen_key = self.prefix + "__gen__"
        self.meta_key = self.legacy_prefix + "__meta__"
        self.ring_key = self.prefix + "__max__"
        self.embedder_key = self.prefix + "__embedder__"
        self.grades_key = self.prefix + "__grades__"
        self.uses_key = self.prefix + "__uses__"
        self.base_key = self.prefix + "__base__"
        self._synced_grades = 0
        self._synced_uses: str | None = None
        self._use_counts: dict[int, int] = {}  # as of the last sync that read them
        self.vectors = False  # read each episode's vector with it (a memory with an embedder)
        self.embedder: str | None = None  # __embedder__ as of the last sync
        self.conflict_key, self.conflict_with, self.conflict_needs_meta = _conflict(namespace)
        self.counters = Counters()
        self._cache: dict[int, Episode] = {}
        # seq -> (when first seen missing, whether it counts as lost once the grace is over)
        self._holes: dict[int, tuple[float, bool]] = {}
        self._bad: set[int] = set()  # seqs whose record cannot be decoded (reported once)
        self._synced_last = 0
        self._live_start = 0  # every cached seq lies in [_live_start, _synced_last]
        self._gen: str | None = None
        self._legacy: Legacy | None = None
        self._synced = False
        self._append_legacy: tuple[Legacy | None] | None = None
        self._lock = Mutex()
        # Index repairs found by read_head: the ring size rebuilt from the keys when __max__
        # is unusable, and a counter that fell behind the stored episodes (its value, the fix).
        self._ring_hint: int | None = None
        self._seq_repair: tuple[str | None, int] | None = None
        self._checked: tuple[tuple[str | None, ...], int, int | None] | None = None
        # A counter found behind its records: (its stored value, the newest record number),
        # applied by read_head while the counter keeps that value (a writer repairs it).
        self._seq_fix: tuple[str | None, int] | None = None
        # A counter found a whole ring or more past the newest episode stored (edited, or a
        # counter restored from another log): (its stored value, the newest record number),
        # read in its place while it keeps that value, and lowered to it by the next append.
        # _ahead_checked: the index values last looked at for it (one listing per state).
        self._seq_ahead: tuple[str | None, int] | None = None
        self._appended: int | None = None  # the sequence number of this memory's last append
        self._ahead_checked: tuple[str | None, str | None, str | None] | None = None
        self._looks_new = False  # the last head read had no counter, change token or ring
        self._new_checked = False  # a new-looking log was listed once for episodes
        self._settings_checked = False  # the provider asked once about unsafe settings
        self._grades_fix: tuple[str | None, int] | None = None
        # Grade numbers taken but not (yet) written: number -> (first seen missing, counts).
        self._grade_holes: dict[int, tuple[float, bool]] = {}
        # The newest cached episode and the newest grade read, as stored: read again with every
        # head, so that a log that went back (an older snapshot, a restored backup, a promoted
        # replica) under the same change token is noticed and read again from the start.
        self._anchor: tuple[int, str] | None = None
        self._grade_anchor: tuple[int, str] | None = None

    # --- keys ---------------------------------------------------------------------------

    def entry_key(self, seq: int, legacy: Legacy | None) -> str:
        if legacy is not None and (seq <= legacy.shared or seq > EXTRA):
            return f"{self.legacy_prefix}{legacy.slot(seq - EXTRA if seq > EXTRA else seq)}"
        return f"{self.prefix}e:{seq}"

    def vector_key(self, seq: int) -> str:
        return f"{self.prefix}v:{seq}"

    def grade_key(self, number: int) -> str:
        return f"{self.prefix}g:{number}"

    def use_key(self, seq: int) -> str:
        return f"{self.prefix}u:{seq}"

    def use_journal_key(self, number: int) -> str:
        return f"{self.prefix}uj:{number}"

    def claim_key(self, episode_id: str) -> str:
        """Where the claim on an explicit episode id is kept (a hash: ids may hold anything)."""
        digest = hashlib.blake2b(episode_id.encode("utf-8", "surrogatepass"), digest_size=16)
        return f"{self.prefix}id:{digest.hexdigest()}"

    async def adopt_ring(self) -> None:
        """Take the log's own ring size as this memory's ``max_episodes``: the one it was
        written with (a tool that inspects a log neither hides nor shrinks anything)."""
        head = await self.read_head()
        if head.ring is not None:
            self.max = head.ring
        elif head.legacy is not None:
            # deepcrew-ai keeps no ring size: its slot count is at least the one it used.
            self.max = max(self.max, head.legacy.count)

    def ring(self, head: Head) -> int:
        """The log's ring size: ours, the largest that recorded, or deepcrew-ai's slot count,
        whichever is largest. Nothing inside it is ever deleted by an append, a sweep or a
        forget of other episodes."""
        return max(self.max, head.ring or 0, head.legacy.count if head.legacy else 0)

    def live_range(self, head: Head) -> range:
        """The sequence numbers this memory shows: its newest ``max_episodes``, or fewer when
        the log's ring is smaller (the writers evict by it)."""
        view = min(self.max, head.ring) if head.ring else self.max
        return range(max(1, head.last - view + 1), head.last + 1)

    def kept_range(self, head: Head) -> range:
        """The sequence numbers the log keeps for every memory on it."""
        return range(max(1, head.last - self.ring(head) + 1), head.last + 1)

    async def owned_keys(self) -> list[str]:
        """Every key of this namespace (ours and deepcrew-ai's), and no key of another."""
        keys = [k for k in await self.provider.keys(self.prefix) if self._ours(k)]
        if self.legacy_prefix != self.prefix:
            # "episodic:a:e:5" is a slot of a deepcrew-ai log named "a:e" only when that log
            # exists (its index does); otherwise it is episode 5 of the namespace "a".
            found = await self.provider.keys(self.legacy_prefix)
            if self.meta_key in found:
                keys += [k for k in found if _legacy_key(k[len(self.legacy_prefix) :])]
        return sorted(set(keys))

    def _ours(self, key: str) -> bool:
        if not key.startswith(self.prefix):
            return False
        rest = key[len(self.prefix) :]
        if rest in _OWN or _ENTRY.fullmatch(rest) or _CLAIM.fullmatch(rest):
            return True
        if _VECTOR.fullmatch(rest) or _GRADE.fullmatch(rest) or _USE.fullmatch(rest):
            return True
        if _JOURNAL_KEY.fullmatch(rest):
            return True
        return self.legacy_prefix == self.prefix and _legacy_key(rest)

    # --- reading --------------------------------------------------------------------------

    async def read_head(self, extra: Sequence[str] = ()) -> Head:
        """The index keys as they stand, read in one batch with the keys *extra* (their values
        in :attr:`Head.extra`), and repaired where they disagree with the records."""
        wanted = [
            self.seq_key,
            self.gen_key,
            self.meta_key,
            self.ring_key,
            self.embedder_key,
            self.grades_key,
            self.uses_key,
            self.base_key,
        ]
        if self.conflict_key:
            wanted.append(self.conflict_key)
        revision: str | None = None
        if self.provider.recall_index:
            found, revision = await self.provider.read_revised(self.prefix, [*wanted, *extra])
        else:
            found = await self.provider.retrieve_many([*wanted, *extra])
        extras = tuple(found[len(wanted) :])
        found = found[: len(wanted)]
        raw_seq, gen, raw_meta, raw_ring, embedder, raw_grades, uses, raw_base, *conflict = found
        self._looks_new = not (raw_seq or gen or raw_ring)
        if conflict and conflict[0] and (raw_meta or not self.conflict_needs_meta):
            raise ConfigurationError(
                f"namespace {escape_hidden(self.namespace)!r} cannot be used in this store: its "
                f"keys overlap those of the log {escape_hidden(self.conflict_with)!r}, which is "
                f"there too (deepcrew-ai's key layout cannot tell them apart); use another "
                f"namespace or another store"
            )
        ring = parse_ring(raw_ring)
        try:
            legacy = _with_base(_parse_legacy(raw_meta), raw_base)
            last = _parse_seq(raw_seq, legacy)
        except CorruptDataError as exc:
            head = await self._recover_head(exc, raw_seq, gen or None)
            legacy, last = _with_base(head.legacy, raw_base), head.last
        base = legacy.shared if legacy else 0
        # Our numbers start after deepcrew-ai's episodes: a counter below them (edited, or
        # another log's) would hide them, and let a sweep take them for leftovers.
        last = max(last, base)
        # A log that exists has a counter past its start and a ring size; one of them missing,
        # emptied or garbled (while episodes remain) is rebuilt from the keys, so that neither
        # a reader hides episodes nor a writer reuses or evicts one by mistake.
        if (last <= base and (gen or raw_ring)) or (ring is None and (raw_ring or last > base)):
            last, ring = await self._check_counters(
                (raw_seq, gen, raw_meta, raw_ring), last, ring, base
            )
        if self._seq_ahead is not None and self._seq_ahead[0] == (raw_seq or None):
            last = self._seq_ahead[1]  # a counter a whole ring past its records
        if self._seq_fix is not None and self._seq_fix[0] == (raw_seq or None):
            last = max(last, self._seq_fix[1])  # a counter found behind its records
        self._ring_hint = ring
        grades = await self._grade_counter(raw_grades or None)
        return Head(
            last,
            gen or None,
            legacy,
            ring,
            raw_ring,
            embedder or None,
            grades,
            uses,
            raw_seq or None,
            raw_grades or None,
            extras,
            revision,
        )

    async def _grade_counter(self, raw: str | None) -> int:
        """``__grades__`` as a number never below the grades stored: one that is unreadable or
        past any real count is rebuilt from the grade keys (listed once per stored value), and
        one found behind them (by :meth:`_sync`) is raised to the newest."""
        if self._grades_fix is not None and self._grades_fix[0] == raw:
            value = int(raw) if raw and _counter_ok(raw) else 0
            return max(value, self._grades_fix[1])
        if raw is None or _counter_ok(raw):
            return int(raw) if raw else 0
        newest = max(await self._numbers(_GRADE, "g:"), default=0)
        self._grades_fix = (raw, newest)
        self.counters.recovered_indexes += 1
        log.warning(
            "episodic log %r: grade counter holds %r, not a count; using %d, the newest grade "
            "stored (the next grade repairs it)",
            self.namespace,
            safe_message(raw, 40),
            newest,
        )
        return newest

    async def _numbers(self, pattern: re.Pattern[str], kind: str) -> list[int]:
        """The numbers of this namespace's records of one *kind* (``e:``, ``g:``) that exist,
        by listing their keys (a counter is never trusted over the records it counts)."""
        listed = await self.provider.keys(self.prefix + kind)
        return [
            n
            for k in listed
            if (m := pattern.fullmatch(k[len(self.prefix) :]))
            and (n := int(m.group(1))) <= _MAX_INDEX
        ]

    async def repair_counter(self, kind: str) -> int:
        """Move the episode (``e:``), grade (``g:``) or use (``uj:``) counter past every record
        it numbers, when it is missing, behind them, unreadable or at the limit of a real count
        (the next number would be refused); return its value.

        Only ever raises a usable counter (a compare-and-set on the value seen), so that writers
        repairing at once cannot take it back below a number one of them has just used; one at
        the limit is rebuilt from the records."""
        key, pattern = {
            "e:": (self.seq_key, _ENTRY),
            "g:": (self.grades_key, _GRADE),
            "uj:": (self.uses_key, _JOURNAL_KEY),
        }[kind]
        numbers = await self._numbers(pattern, kind)
        floor = base = 0
        if kind == "e:":
            legacy = (await self.read_head()).legacy
            base = legacy.shared if legacy else 0
        floor = max([base, *numbers])
        while True:
            raw = (await self.provider.retrieve_many([key]))[0] or None
            current = int(raw) if raw and _counter_ok(raw) else None
            if current is not None and floor <= current < _MAX_INDEX:
                return current  # (at the limit, the next number would be refused: rebuilt)
            if raw is None and floor <= base:
                return base  # nothing stored past where a new counter starts
            if await self.provider.write_if({key: raw}, {key: str(floor)}):
                self.counters.recovered_indexes += 1
                log.warning(
                    "episodic log %r: counter %s held %r, behind the records it numbers; "
                    "moved to %d",
                    self.namespace,
                    key.rpartition(":")[2],
                    safe_message(str(raw), 40),
                    floor,
                )
                return floor

    async def _check_counters(
        self, seen: tuple[str | None, ...], last: int, ring: int | None, base: int
    ) -> tuple[int, int | None]:
        """The counter and the ring size as the keys that exist show them; the scan runs once
        for the same index values."""
        if self._checked is not None and self._checked[0] == seen:
            return self._checked[1], self._checked[2]
        keys = await self.owned_keys()
        entries = [
            int(m.group(1))
            for k in keys
            if k.startswith(self.prefix) and (m := _ENTRY.fullmatch(k[len(self.prefix) :]))
        ]
        found_last, found_ring = last, ring
        if entries and max(entries) > last:
            found_last = max(entries)
            self._seq_repair = (seen[0], found_last)
        if found_ring is None and entries:
            found_ring = max(found_last - min(entries) + 1, base)
        if (found_last, found_ring) != (last, ring):
            self.counters.recovered_indexes += 1
            log.warning(
                "episodic log %r: index keys disagree with the stored episodes (counter %r, "
                "ring %r); using counter %d and ring %s from the keys",
                self.namespace,
                safe_message(str(seen[0]), 40),
                safe_message(str(seen[3]), 40),
                found_last,
                found_ring,
            )
        self._checked = (seen, found_last, found_ring)
        return found_last, found_ring

    async def _check_ahead(self, head: Head, keys: Collection[str] | None = None) -> Head:
        """*head*, or the head as the records show it when its counter is a whole view or more
        past the newest episode stored (none left in the range this memory shows, some below
        it: a counter edited, or restored from another log). Then the newest record is read in the
        counter's place, so that no reader hides those episodes and no sweep or shrink takes
        them for leftovers below the ring, and the next append lowers the counter to it.

        Lists the episode keys once per index state, or looks at *keys*, a listing the caller
        holds."""
        base = head.legacy.shared if head.legacy else 0
        seen = (head.raw_seq, head.gen, head.raw_ring)
        if head.last <= base or (keys is None and self._ahead_checked == seen):
            return head
        if keys is None:
            self._ahead_checked = seen
            numbers = await self._numbers(_ENTRY, "e:")
        else:
            numbers = [
                int(m.group(1))
                for k in keys
                if k.startswith(self.prefix) and (m := _ENTRY.fullmatch(k[len(self.prefix) :]))
            ]
        # This memory's view, which lies inside what the log keeps: empty, with episodes
        # below it, is a counter past its records (what sweep would delete lies below too).
        view = self.live_range(head)
        stored = [n for n in numbers if base < n <= _MAX_INDEX]
        if base:
            stored.append(base)  # deepcrew-ai's episodes, numbered 1..base, read in place
        if not stored or max(stored) >= view.start:
            return head
        # A listing is no snapshot: under writers that turn the ring over while it runs, it
        # can miss every episode of the view. A counter that moved meanwhile is a live log.
        now = await self.provider.retrieve_many(
            [self.seq_key, self.entry_key(head.last, head.legacy)]
        )
        if (now[0] or None) != head.raw_seq or now[1]:
            return head
        newest = max(stored)
        self._seq_ahead = self._seq_repair = (head.raw_seq, newest)
        self.counters.recovered_indexes += 1
        log.warning(
            "episodic log %r: episode counter %r is past every episode this memory would "
            "show (%d) and the newest stored is %d; reading up to it (the next record lowers "
            "the counter)",
            self.namespace,
            escape_hidden(str(head.raw_seq))[:40],
            len(view),
            newest,
        )
        return dataclasses.replace(head, last=newest)

    async def _recover_head(
        self, exc: CorruptDataError, raw_seq: str | None, gen: str | None
    ) -> Head:
        """An index record is corrupt: rebuild the index from the keys that exist, losing no
        episode. Nothing is written here; the next append repairs the counter."""
        self.counters.recovered_indexes += 1
        log.warning("episodic log %r: %s; rebuilding the index from its keys", self.namespace, exc)
        keys = await self.owned_keys()
        entries = [
            int(m.group(1))
            for k in keys
            if k.startswith(self.prefix) and (m := _ENTRY.fullmatch(k[len(self.prefix) :]))
        ]
        slots = sorted(
            int(k[len(self.legacy_prefix) :])
            for k in keys
            if k.startswith(self.legacy_prefix) and _SLOT.fullmatch(k[len(self.legacy_prefix) :])
        )
        legacy: Legacy | None = None
        if slots:
            values = await self.provider.retrieve_many([f"{self.legacy_prefix}{s}" for s in slots])
            stamped = [(_timestamp_of(v), s) for s, v in zip(slots, values, strict=True) if v]
            count = slots[-1] + 1
            newest_slot = max(stamped)[1] if stamped else count - 1
            legacy = Legacy(count, (newest_slot + 1) % count)
        last = int(raw_seq) if raw_seq and _counter_ok(raw_seq) else 0
        last = max([last, *(e for e in entries if e <= _MAX_INDEX), legacy.shared if legacy else 0])
        return Head(last, gen, legacy)

    async def sync(self, apply: Callable[[Changes], None] | None = None) -> Changes:
        """Bring the cache up to date with the provider; *apply* sees the changes while the
        cache is still locked, so followers (the recall index) stay in step with it."""
        async with self._lock:
            changes = await self._sync()
            if apply is not None:
                apply(changes)
            return changes

    async def _sync(self, again: bool = True) -> Changes:
        # Every await happens before the cache is touched: a sync cancelled part-way (a recall
        # timeout) leaves the cache and its followers exactly as they were.
        await self.check_settings()
        # Read with the head: the records just past the counters as last synced (there is
        # none unless a counter fell behind) and the newest records already read (unchanged
        # unless the log went back).
        probes = [
            self.entry_key(self._synced_last + 1, self._legacy),
            self.grade_key(self._synced_grades + 1),
        ]
        anchors = [a for a in (self._anchor, self._grade_anchor) if self._synced and a]
        extra = [*probes]
        if self._synced and self._anchor:
            extra.append(self.entry_key(self._anchor[0], self._legacy))
        if self._synced and self._grade_anchor:
            extra.append(self.grade_key(self._grade_anchor[0]))
        head = await self.read_head(extra)
        next_entry, next_grade, *anchored = head.extra
        same_layout = head.legacy == self._legacy
        if again and same_layout and head.last == self._synced_last and next_entry:
            return await self._behind("e:", head)
        if (
            again
            and self._looks_new
            and head.legacy is None  # deepcrew-ai's own index numbers its episodes
            and self._seq_fix is None
            and not self._new_checked
        ):
            # The index reads as a new log: either it is one, or it lost its whole index (a
            # cache policy evicted the counter, change token and ring size, and the first
            # episode with them). Its episodes may still be there: list them once (a writer
            # does the same before it numbers the first episode), and again only after the
            # index reappeared and vanished again.
            self._new_checked = True
            return await self._behind("e:", head)
        if not self._looks_new:
            self._new_checked = False
        if again and head.grades == self._synced_grades and next_grade:
            return await self._behind("g:", head)
        went_back = self._synced and head.gen == self._gen and same_layout
        went_back = went_back and (
            head.last < self._synced_last
            or head.grades < self._synced_grades
            or any(
                value != anchor[1]
                and (anchor is self._grade_anchor or anchor[0] in self.live_range(head))
                for anchor, value in zip(anchors, anchored, strict=True)
            )
        )
        if went_back:
            self.counters.rewound_logs += 1
            log.warning(
                "episodic log %r went back under this reader (restored from an older snapshot "
                "or backup, a promoted replica, a flush): reading it again from the start",
                self.namespace,
            )
        reset = (
            not self._synced
            or went_back
            or head.gen != self._gen
            or head.legacy != self._legacy
            or head.last < self._synced_last  # the log was re-created under us
        )
        # A read from the start lists the records once: the one just past the counter (read
        # below) shows a counter behind them, unless a gap follows it (a forgotten episode),
        # and the episodes past the gap must not be hidden by it either.
        checked = again and reset and head.legacy is None and self._seq_fix is None and head.last
        if checked and await self._newest_stored(head.last) > head.last:
            return await self._behind("e:", head)
        live = self.live_range(head)
        synced_last = 0 if reset else self._synced_last
        holes = {} if reset else {s: h for s, h in self._holes.items() if s in live}
        wanted = [*range(max(live.start, synced_last + 1), live.stop), *holes]
        if reset and head.legacy is not None:
            # deepcrew-ai episodes appended after the adoption (a worker not yet upgraded):
            # all of them, whatever this memory's ring (their writer keeps their number).
            wanted += [EXTRA + p for p in head.legacy.extras()]
        keys = [self.entry_key(s, head.legacy) for s in wanted]
        vector_keys = [self.vector_key(s) for s in wanted] if self.vectors and wanted else []
        # Grades: the new ones (all of them after a reset), and those whose number was taken
        # but not yet written when last read (a writer between its two steps).
        first_grade = 1 if reset else self._synced_grades + 1
        if head.grades - first_grade > _MAX_GRADE_GAP:
            # A counter far past what was ever written (damaged): read the grades that exist.
            numbers = sorted(n for n in await self._numbers(_GRADE, "g:") if n >= first_grade)
        else:
            numbers = list(range(first_grade, head.grades + 1))
        grade_holes = {} if reset else dict(self._grade_holes)
        numbers = sorted({*numbers, *grade_holes})
        grade_keys = [self.grade_key(n) for n in numbers]
        # Use counts: read again, by key, whenever a use was counted since the last sync: those
        # the use journal names (the episodes used since), or every cached one when the
        # journal does not reach back that far.
        read_uses = head.uses is not None and (reset or head.uses != self._synced_uses)

        def shown() -> list[int]:
            # The episodes this memory shows; a pass over the cache, so only when use counts
            # are read (at 100,000 episodes it would cost every sync 20 ms).
            return sorted({*wanted, *(() if reset else (s for s in self._cache if s in live))})

        since = 0 if self._synced_uses is None else _use_number(self._synced_uses)
        now_uses = _use_number(head.uses)
        journal: list[int] = []
        known = read_uses and not reset and since is not None and now_uses is not None
        if (
            known
            and since is not None
            and now_uses is not None
            and 0 < now_uses - since <= _USE_JOURNAL
        ):
            journal = list(range(since + 1, now_uses + 1))
        use_seqs = [] if journal or not read_uses else shown()
        journal_keys = [self.use_journal_key(n) for n in journal]
        use_keys = [self.use_key(s) for s in use_seqs]
        batch = [*keys, *vector_keys, *grade_keys, *use_keys, *journal_keys]
        inconclusive = head.last != self._synced_last or head.grades != self._synced_grades
        if batch or (again and (inconclusive or not same_layout)):
            # The counters again, with the records just past them: read together, they show
            # a counter behind its records without a listing.
            batch += [
                self.seq_key,
                self.grades_key,
                self.entry_key(head.last + 1, head.legacy),
                self.grade_key(head.grades + 1),
            ]
        found = await self.provider.retrieve_many(batch) if batch else []
        if found:
            raw_seq, raw_grades, after_entry, after_grade = found[-4:]
            if again and after_entry and (raw_seq or None) == head.raw_seq and same_layout:
                return await self._behind("e:", head)
            if again and after_grade and (raw_grades or None) == head.raw_grades:
                return await self._behind("g:", head)
        cut = iter(found)
        values = [next(cut) for _ in keys]
        if (
            again
            and not any(v for s, v in zip(wanted, values, strict=True) if s in live)
            and (reset or not any(s in self._cache for s in live))
            and (await self._check_ahead(head)) is not head
        ):
            # Nothing stored where the counter says the newest episodes are, and episodes
            # stored a whole ring below it: read by the records instead.
            return await self._sync(again=False)
        vectors = [next(cut) for _ in vector_keys]
        graded = [next(cut) for _ in grade_keys]
        raw_uses = [next(cut) for _ in use_keys]
        entries = [next(cut) for _ in journal_keys]
        use_now = {} if reset or not journal else dict(self._use_counts)
        if journal:
            used = _used_seqs(entries)
            if used is None:  # an entry missing (in flight, trimmed, an older writer)
                use_seqs, use_now = shown(), {}
            else:
                fetched = set(wanted)
                use_seqs = sorted(
                    s
                    for s in used
                    if s in fetched or (not reset and s in live and s in self._cache)
                )
            use_keys = [self.use_key(s) for s in use_seqs]
            raw_uses = await self.provider.retrieve_many(use_keys) if use_keys else []
        for seq, raw in zip(use_seqs, raw_uses, strict=True):
            if raw and _DIGITS.fullmatch(raw):
                use_now[seq] = int(raw)
        use_counts: dict[int, int] | None = {} if reset else None
        if read_uses:
            use_counts = dict(use_now)

        changes = Changes(reset=reset)
        if reset:
            self._cache.clear()
            self._live_start = 0
            self._anchor = self._grade_anchor = None
        # Only what fell out of the ring since the last sync is looked at, not the whole cache,
        # so a sync costs the same at 100 or 100,000 episodes.
        if live.start - self._live_start <= len(self._cache):
            stale = [s for s in range(self._live_start, live.start) if s in self._cache]
        else:
            stale = [s for s in self._cache if s < live.start]
        for seq in stale:
            del self._cache[seq]
            changes.removed.append(seq)
        self._bad = {s for s in self._bad if s in live}
        now = time.monotonic()
        for seq, key, raw in zip(wanted, keys, values, strict=True):
            if raw is None or raw == "":
                self._bad.discard(seq)  # a deleted record is no longer a corrupt one
                first, counts = holes.get(seq, (now, not reset))
                if now - first < HOLE_GRACE_SECONDS:
                    holes[seq] = (first, counts)
                    continue
                holes.pop(seq, None)
                if counts:
                    self._lost("sequence", seq)
                continue
            holes.pop(seq, None)
            episode = self._decode(seq, key, raw)
            if episode is not None:
                self._cache[seq] = episode
                changes.added.append((seq, episode))
                if seq < EXTRA and (self._anchor is None or seq >= self._anchor[0]):
                    self._anchor = (seq, raw)
        for seq, vector in zip(wanted, vectors, strict=False):
            decoded = decode_vector(vector) if vector and seq in self._cache else None
            if decoded is not None:  # (one that is no vector is ignored: backfill rebuilds it)
                changes.vectors[seq] = decoded
        for number, raw in zip(numbers, graded, strict=True):
            if raw:
                grade_holes.pop(number, None)
                grade = self._decode_grade(number, raw)
                if grade is not None:
                    changes.grades.append((number, grade))
                if self._grade_anchor is None or number >= self._grade_anchor[0]:
                    self._grade_anchor = (number, raw)
                continue
            # Missing: taken by a writer still between its counter and its record, swept, or
            # left by a writer that died. Read again until the grace period is over (after a
            # reset, only the newest numbers can still be in flight).
            pending = grade_holes.get(number)
            if pending is None and (not reset or number > head.grades - _GRADES_IN_FLIGHT):
                pending = (now, not reset)
            if pending is not None and now - pending[0] < HOLE_GRACE_SECONDS:
                grade_holes[number] = pending
                continue
            grade_holes.pop(number, None)
            if pending is not None and pending[1]:
                self._lost("grade", number)
        changes.uses = use_counts
        if use_counts is not None:
            self._use_counts = use_counts
        self._synced_grades = max(self._synced_grades if not reset else 0, head.grades)
        self._synced_uses = head.uses
        self._holes = holes
        self._grade_holes = grade_holes
        self.embedder = head.embedder
        self._synced_last = max(synced_last, head.last)
        self._live_start = live.start
        self._gen, self._legacy, self._synced = head.gen, head.legacy, True
        return changes

    async def _newest_stored(self, counted: int) -> int:
        """The newest episode number stored, by the records: the newest the store's recall
        index holds when it keeps one (a query; a listing of a Redis namespace walks the whole
        database) and, when that is past *counted* (the counter), its record is there; else
        the newest the keys name."""
        if self.provider.recall_index:
            try:
                newest: int = await self.read_index(lambda reader: reader.newest_seq())
                if (
                    newest <= counted
                    or (await self.provider.retrieve_many([self.entry_key(newest, None)]))[0]
                ):
                    return newest
                raise StaleIndexError(f"the index holds episode {newest}, the log does not")
            except (StaleIndexError, StorageError) as exc:  # edited: the keys still tell
                self.counters.recovered_indexes += 1
                log.warning(
                    "episodic log %r: the store's recall index cannot tell the newest episode "
                    "stored (%s); listing the records instead",
                    self.namespace,
                    safe_message(str(exc), 200),
                )
        return max(await self._numbers(_ENTRY, "e:"), default=0)

    async def _behind(self, kind: str, head: Head) -> Changes:
        """A record is stored past its counter: the counter fell behind (evicted, restored
        from an older backup, edited). Read by the records instead, until a writer repairs
        the counter (the next append does, before it writes), and sync again."""
        pattern = _ENTRY if kind == "e:" else _GRADE
        newest = max(await self._numbers(pattern, kind), default=0)
        raw = head.raw_seq if kind == "e:" else head.raw_grades
        if kind == "e:" and newest > head.last:
            self._seq_fix = self._seq_repair = (raw, newest)
            self._seq_ahead = None
        elif kind == "g:" and newest > head.grades:
            self._grades_fix = (raw, newest)
        else:
            return await self._sync(again=False)
        self.counters.recovered_indexes += 1
        log.warning(
            "episodic log %r: %s counter %r is behind the records it numbers; reading up to "
            "%d (the next write repairs it)",
            self.namespace,
            "episode" if kind == "e:" else "grade",
            safe_message(str(raw), 40),
            newest,
        )
        return await self._sync(again=False)

    async def check_settings(self) -> None:
        """Ask the provider once whether its settings can lose records; log and count each."""
        if not self._settings_checked:
            self._settings_checked = True
            for problem in await self.provider.unsafe_settings():
                self.counters.unsafe_settings += 1
                log.warning("episodic log %r: %s", self.namespace, problem)

    def note_corrupt(self, seqs: Collection[int]) -> None:
        """Count and log, once each, the undecodable records a read from the store's index
        found in view (a sync counts those it reads the same way)."""
        for seq in seqs:
            if seq not in self._bad:
                self._bad.add(seq)
                self.counters.corrupt_records += 1
                log.warning(
                    "episodic log %r: skipping undecodable record %se:%d",
                    self.namespace,
                    self.prefix,
                    seq,
                )

    def _lost(self, what: str, number: int) -> None:
        self.counters.missing_records += 1
        log.warning(
            "episodic log %r: %s %d was taken by a writer that never wrote it (it probably "
            "died); that record is lost",
            self.namespace,
            what,
            number,
        )

    def _decode(self, seq: int, key: str, raw: str) -> Episode | None:
        try:
            episode = decode_entry(raw)
        except ValueError as exc:
            if seq not in self._bad:
                self._bad.add(seq)
                self.counters.corrupt_records += 1
                log.warning(
                    "episodic log %r: skipping undecodable record %s: %s",
                    self.namespace,
                    key,
                    str(exc).splitlines()[0],
                )
            return None
        self._bad.discard(seq)  # repaired by hand since
        return episode

    def _decode_grade(self, number: int, raw: str) -> Grade | None:
        try:
            return Grade.from_json(raw)
        except ValueError as exc:
            self.counters.corrupt_records += 1
            log.warning("episodic log %r: skipping grade %d: %s", self.namespace, number, exc)
            return None

    def decode_grades(self, records: Sequence[str]) -> list[Grade]:
        """*records* (grade records the store's index read) decoded, in order; one that
        cannot be decoded is skipped, counted and logged."""
        grades: list[Grade] = []
        for raw in records:
            try:
                grades.append(Grade.from_json(raw))
            except ValueError as exc:
                self.counters.corrupt_records += 1
                log.warning("episodic log %r: skipping a grade: %s", self.namespace, exc)
        return grades

    async def beyond_view(self) -> tuple[list[tuple[int, Episode]], list[str]]:
        """The episodes the log keeps below this memory's range (for a memory with a larger
        ring), oldest first, and the keys of the undecodable records among them. Read for
        ``forget`` and ``sweep``, which act on the whole log, not only on what this memory
        shows."""
        head = await self.read_head()
        seqs = range(self.kept_range(head).start, self.live_range(head).start)
        if not seqs:
            return [], []
        keys = [self.entry_key(s, head.legacy) for s in seqs]
        values = await self.provider.retrieve_many(keys)
        found: list[tuple[int, Episode]] = []
        bad: list[str] = []
        for seq, key, raw in zip(seqs, keys, values, strict=True):
            if not raw:
                continue
            try:
                found.append((seq, decode_entry(raw)))
            except ValueError:
                bad.append(key)
        return found, bad

    def episode(self, seq: int) -> Episode:
        """The cached episode *seq* (as stored)."""
        return self._cache[seq]

    def cached(self) -> Iterator[tuple[int, Episode]]:
        """The cached episodes, oldest first."""
        for seq in sorted(self._cache):
            yield seq, self._cache[seq]

    @property
    def corrupt(self) -> int:
        """Undecodable records in the live range as of the last sync (skipped, left in place)."""
        return len(self._bad)

    # --- writing --------------------------------------------------------------------------

    async def append(
        self,
        episode: Episode,
        *,
        claim: str | None = None,
        vector: tuple[str, str] | None = None,
    ) -> tuple[int, bool]:
        """Store *episode* as the newest entry; return its sequence number and whether its
        vector was stored. *claim*: the claim key of its explicit id (see :meth:`claim`),
        pointed at the new entry in the same step. *vector*: ``(stored vector, embedder
        record)``, stored with the episode when the log's vectors are this embedder's (or it
        has none yet, and then the record is written too)."""
        if self._synced:
            legacy = self._legacy
        elif self._append_legacy is not None:
            legacy = self._append_legacy[0]
        else:
            # deepcrew-ai's index never changes under us, so one read serves every append.
            head = await self.read_head()
            legacy = head.legacy
            self._append_legacy = (legacy,)
            if head.last > (legacy.shared if legacy else 0):
                # The first append of a memory that never read the log: make sure its counter
                # is not a whole ring past the episodes stored (they would fall out of view).
                newest = await self.provider.retrieve_many([self.entry_key(head.last, legacy)])
                if not newest[0]:
                    await self._check_ahead(head)
            if legacy is None and self._seq_repair is None and self._seq_fix is None:
                # ... nor behind them past a gap (lowered onto a forgotten episode): the number
                # it gives would be free, and the episode written there fall below the view.
                stored = await self._newest_stored(head.last)
                if stored > head.last:
                    self._seq_repair = (head.raw_seq, stored)
                    self.counters.recovered_indexes += 1
                    log.warning(
                        "episodic log %r: episode counter %r is behind the records it numbers; "
                        "moving it to %d before writing",
                        self.namespace,
                        safe_message(str(head.raw_seq), 40),
                        stored,
                    )
        initial = legacy.shared if legacy else 0
        # A counter found behind the stored episodes (emptied, zeroed), or past every one.
        await self._apply_seq_repair(legacy)
        hint = self._ring_hint
        # This writer's appends more than a whole view apart: the episode a view below the new
        # number (the one its ring evicts) is read in the same step, and none there (a counter
        # moved past the episodes stored, or forgotten episodes) is checked on the records
        # before writing. Its writer finished long ago, so one in flight is no false alarm.
        # Only where the step is atomic: where the counter is raised in a step of its own
        # (Redis), refusing the number would leave a hole among the newest episodes.
        appended = self._appended
        probing = [self.provider.atomic_increment_and_write]

        def probe(seq: int) -> list[str]:
            below = seq - self.max
            if probing[0] and appended is not None and seq - appended > self.max > 0:
                return [self.entry_key(below, legacy)] if below > initial else []
            return []

        # The ring read in the step can understate what the records keep (a __max__ lowered
        # by hand): the episode one below what this append evicts by its best guess of the ring
        # is read in the same step. In a consistent log the previous append evicted it; one
        # there means the records keep more, so nothing is evicted and the ring is rebuilt
        # from them (_rebuild_ring). Only where the step is atomic (no append in flight below
        # this one), and not on deepcrew-ai's slots, which are kept in place.
        guess = max(self.max, hint or 0, legacy.count if legacy else 0)
        checking = self.provider.atomic_increment_and_write and legacy is None

        def ring_probe(seq: int) -> list[str]:
            # The ring in the step is the guess, or this writer's own when the stored one was
            # lowered since the guess was read.
            below = sorted({seq - guess - 1, seq - self.max - 1})
            return [self.entry_key(n, legacy) for n in below if checking and n > initial]

        def probes(seq: int) -> list[str]:
            return [*probe(seq), *ring_probe(seq)]

        understated: list[int] = []
        body = episode.to_json()
        stored_vector = [False]

        def place(
            seq: int, values: Mapping[str, str | None], legacy: Legacy | None = legacy
        ) -> tuple[dict[str, str], list[str]]:
            below = probe(seq)
            if below and not values.get(below[0]):
                raise CounterAhead(seq)
            # deepcrew-ai's index is read in the same step too: a worker of it still writing the
            # log (a fleet half upgraded) moves its slots, and what falls out is decided on them
            # as they stand.
            if self.meta_key in values:
                with contextlib.suppress(CorruptDataError):  # else: on the index as last read
                    legacy = _with_base(
                        _parse_legacy(values[self.meta_key]), values.get(self.base_key)
                    )
            # __max__ is read in the same atomic step: what falls out is decided on the ring as
            # it stands now, and a larger ring is raised here, never lowered.
            stored = parse_ring(values.get(self.ring_key))
            # An unusable __max__ is replaced by the ring rebuilt from the keys (read_head).
            ring = max(self.max, stored or hint or 0, legacy.count if legacy else 0)
            items = {self.entry_key(seq, legacy): body}
            if stored != ring:
                items[self.ring_key] = str(ring)
            if claim is not None:
                items[claim] = f"seq:{seq}"
            stored_vector[0] = False
            if vector is not None:
                # Decided on the embedder record as it stands in this step: a vector is never
                # stored beside another embedder's. An unreadable record counts as none.
                found = decode_identity(values.get(self.embedder_key) or None)
                if found is None or found == decode_identity(vector[1]):
                    items[self.vector_key(seq)] = vector[0]
                    stored_vector[0] = True
                    if found is None:
                        items[self.embedder_key] = vector[1]
            if seq == initial + 1:
                # A new counter: a new log (perhaps re-created after a wipe). A new change
                # token makes every reader that cached an older log start over.
                items[self.gen_key] = uuid.uuid4().hex
            if not values.get(self.base_key):
                # How many deepcrew-ai episodes our numbers start after, fixed from now on: its
                # workers may go on appending (their episodes are read past it, never in place
                # of ours).
                items[self.base_key] = str(min(seq - 1, legacy.count if legacy else 0))
            understated.clear()
            check = self.entry_key(seq - ring - 1, legacy)
            if check in ring_probe(seq) and values.get(check):
                understated.append(seq)
                return items, []
            evicted = seq - ring
            if evicted < 1:
                return items, []
            return items, [self.entry_key(evicted, legacy), self.vector_key(evicted)]

        read = [self.ring_key, self.base_key]
        if self.legacy_prefix == self.prefix:  # one hash slot on a cluster: read it with them
            read.append(self.meta_key)
        if vector is not None:
            read.append(self.embedder_key)
        if self._looks_new:
            # The index reads as a new log: make sure no episode is stored past it (a counter,
            # change token and ring size all evicted) before numbering from the start.
            self._looks_new = False
            await self.repair_counter("e:")
        try:
            seq = await self._numbered(
                self.seq_key,
                place,
                "e:",
                initial=initial,
                read=read,
                fresh=lambda seq: [self.entry_key(seq, legacy)],
                probe=probes,
            )
        except CounterAhead:
            # Nothing just below the number the counter gave, a whole view past this writer's
            # last record: the counter may have been moved past the episodes stored. Checked on
            # the records (lowered when so), and the append made again without the probe.
            self._appended = None
            probing[0] = False
            await self._check_ahead(await self.read_head())
            await self._apply_seq_repair(legacy)
            seq = await self._numbered(
                self.seq_key,
                place,
                "e:",
                initial=initial,
                read=read,
                fresh=lambda seq: [self.entry_key(seq, legacy)],
                probe=ring_probe,
            )
        if understated:
            await self._rebuild_ring(seq)
        self._appended = seq
        return seq, stored_vector[0]

    async def _rebuild_ring(self, seq: int) -> None:
        """After the append of *seq* found an episode its ring should have evicted: rebuild
        the ring from the records (the run of episodes just below *seq*, across gaps shorter
        than it, never below the stored ring), raise ``__max__`` to it (only upwards), and make the eviction the
        append held back, by the rebuilt ring. A stray record below the ring (not part of the
        run) leaves the ring as stored, and is listed once."""
        # Walk down from *seq* through the episodes stored below it; a gap (episodes forgotten)
        # no longer than the run so far is part of it, a longer one leaves a stray below.
        low = seq
        for number in sorted(
            (n for n in await self._numbers(_ENTRY, "e:") if n < seq), reverse=True
        ):
            if low - number - 1 > seq - low:
                break
            low = number
        run = seq - low
        while True:
            raw = (await self.provider.retrieve_many([self.ring_key]))[0] or None
            stored = parse_ring(raw) or 0
            ring = max(self.max, stored, min(run, MAX_RING))
            if ring > stored:
                if not await self.provider.write_if(
                    {self.ring_key: raw}, {self.ring_key: str(ring)}
                ):
                    continue
                self.counters.recovered_indexes += 1
                log.warning(
                    "episodic log %r: ring size %r is below the %d episodes the log keeps; "
                    "raised to %d",
                    self.namespace,
                    safe_message(str(raw), 40),
                    run,
                    ring,
                )
            break
        self._ring_hint = ring
        evicted = seq - ring
        if evicted >= 1:
            # Only while the ring is still the one decided on: a writer that raised it since
            # keeps that episode.
            await self.provider.write_if(
                {self.ring_key: str(ring)},
                {},
                [self.entry_key(evicted, None), self.vector_key(evicted)],
            )

    async def _apply_seq_repair(self, legacy: Legacy | None) -> None:
        """Move the episode counter to where a read found it should be (past the episodes
        stored when it fell behind them, down to the newest when it was past every one), unless
        another writer changed it since it was read."""
        if self._seq_repair is None:
            return
        raw, floor = self._seq_repair
        self._seq_repair = None
        expect: dict[str, str | None] = {self.seq_key: raw or None}
        if raw and _counter_ok(raw) and int(raw) > floor:
            # Lowered (a counter far past its records): only while nothing is stored at the
            # number it holds, so that no record numbered by it is left above it.
            expect[self.entry_key(int(raw), legacy)] = None
        await self.provider.write_if(expect, {self.seq_key: str(floor)})

    async def _numbered(
        self,
        key: str,
        place: Then,
        kind: str,
        *,
        initial: int = 0,
        read: Sequence[str] = (),
        fresh: Fresh,
        probe: Fresh | None = None,
    ) -> int:
        """``increment_and_write`` of a new record numbered by the counter *key*, which never
        overwrites a record: a counter that is unreadable, past any real count or behind the
        records (the number it gives is taken) is repaired from the records, and the write
        tried again. *probe* names more keys to read in the same step, for *place* to look
        at (they need not be absent)."""

        def guarded(number: int, values: Mapping[str, str | None]) -> tuple[Any, Any]:
            if number > _MAX_INDEX or any(values.get(k) for k in fresh(number)):
                raise CounterBehind(number)
            return place(number, values)

        def named(number: int) -> list[str]:
            return [*fresh(number), *(probe(number) if probe else ())]

        for attempt in range(_REPAIRS):
            try:
                return await self.provider.increment_and_write(
                    key, guarded, initial=initial, read=read, fresh=named
                )
            except CorruptDataError:
                if attempt == _REPAIRS - 1:
                    raise
            except CounterBehind:
                if attempt == _REPAIRS - 1:
                    break
            # The provider gave a number that cannot be used; repairing only ever raises the
            # counter, so concurrent repairers never reuse a number.
            await self.repair_counter(kind)
        raise CorruptDataError(
            f"episodic log {escape_hidden(self.namespace)!r}: counter {key!r} keeps naming "
            f"records that are already stored; nothing was written"
        )

    async def claim(self, episode_id: str) -> str:
        """Reserve *episode_id* for one new episode, atomically across every writer; return the
        claim key to pass to :meth:`append`. Raises :class:`InvalidEpisodeError` when an
        episode the log keeps already has it.

        A claim holds ``seq:<n>`` (the episode it names) or ``pending:<time>`` (a writer between
        its claim and its append). A claim whose episode is gone (evicted, forgotten) or whose
        writer died (pending past the grace period) is stale and may be taken over, with a
        compare-and-set on the value seen, so two writers can never both take it.
        """
        key = self.claim_key(episode_id)
        while True:
            seen = (await self.provider.retrieve_many([key]))[0] or None
            if seen is None:
                # No claim: the episode may still be in the log, from a writer that kept no
                # claims (deepcrew-ai, this library's 0.1), below this memory's own range.
                beyond, _ = await self.beyond_view()
                if any(ep.id == episode_id for _, ep in beyond):
                    raise InvalidEpisodeError(
                        f"an episode with id {safe_message(episode_id, 140)!r} is already stored "
                        f"in namespace {escape_hidden(self.namespace)!r}; record a copy without "
                        f"the id to store it again"
                    )
            if seen is not None and not await self._stale_claim(seen, episode_id):
                raise InvalidEpisodeError(
                    f"an episode with id {safe_message(episode_id, 140)!r} is already stored in "
                    f"namespace {escape_hidden(self.namespace)!r}; record a copy without the id "
                    f"to store it again"
                )
            if await self.provider.write_if({key: seen}, {key: f"pending:{time.time():.3f}"}):
                return key

    async def release(self, claim: str) -> None:
        """Give a claim back (its append failed before it wrote anything)."""
        await self.provider.delete([claim])

    async def _stale_claim(self, value: str, episode_id: str) -> bool:
        kind, _, arg = value.partition(":")
        if kind == "pending":
            try:
                return time.time() - float(arg) > HOLE_GRACE_SECONDS
            except ValueError:
                return True
        if kind != "seq" or not _DIGITS.fullmatch(arg):
            return True  # not a claim this library wrote
        seq = int(arg)
        head = await self.read_head()
        if seq not in self.kept_range(head):
            return True
        raw = (await self.provider.retrieve_many([self.entry_key(seq, head.legacy)]))[0]
        if not raw:
            return True
        try:
            return Episode.from_json(raw).id != episode_id
        except ValueError:
            return False  # unreadable: it may still be that episode; keep the claim

    async def delete_seqs(self, seqs: Collection[int], also: Collection[str] = ()) -> None:
        """Delete episodes by sequence number (and the keys *also*) and tell every reader to
        reload."""
        keys = [*(self.entry_key(s, self._legacy) for s in seqs), *also]
        keys += [self.vector_key(s) for s in seqs]
        keys += [self.use_key(s) for s in seqs]
        await self.provider.write({self.gen_key: uuid.uuid4().hex}, keys)
        self._synced = False

    @property
    def identity(self) -> tuple[str, int] | None:
        """The embedder that wrote the log's vectors, decoded: ``(name, dimension)`` as of
        the last sync (``None``: none recorded, or a record that cannot be read)."""
        return decode_identity(self.embedder)

    @property
    def synced(self) -> bool:
        return self._synced

    async def read_embedder(self) -> str | None:
        """``__embedder__`` as stored now (kept in :attr:`embedder`)."""
        self.embedder = (await self.provider.retrieve_many([self.embedder_key]))[0] or None
        return self.embedder

    async def write_vectors(self, vectors: Mapping[int, str], identity: str | None) -> bool:
        """Store *vectors* (by sequence number) if the log's embedder record still is
        *identity* (compare-and-set: a concurrent ``reembed`` wins); ``False`` otherwise."""
        items = {self.vector_key(seq): raw for seq, raw in vectors.items()}
        return await self.provider.write_if({self.embedder_key: identity}, items)

    async def set_embedder(self, seen: str | None, identity: str) -> bool:
        """Record *identity* as the log's embedder if the record still is *seen*, and tell
        every reader to reload (its vectors are now another embedder's)."""
        items = {self.embedder_key: identity, self.gen_key: uuid.uuid4().hex}
        done = await self.provider.write_if({self.embedder_key: seen}, items)
        self._synced = False
        return done

    async def touch(self) -> None:
        """Tell every reader to reload (vectors were written for cached episodes)."""
        await self.provider.write({self.gen_key: uuid.uuid4().hex})
        self._synced = False

    async def clear(self) -> None:
        """Delete every key of this namespace except the counter, and invalidate readers."""
        keep = {self.seq_key, self.gen_key, self.base_key}
        doomed = [k for k in await self.owned_keys() if k not in keep]
        await self.provider.write({self.gen_key: uuid.uuid4().hex}, doomed)
        self._synced = False
        self._append_legacy = None

    async def shrink(self, max_episodes: int) -> int:
        """Lower the log's ring size to *max_episodes* for every memory on it, and delete the
        episodes that fall outside it; return how many episode keys were deleted. This memory
        adopts the new size too (a memory with a larger ``max_episodes`` raises the ring again
        on its next record)."""
        size = integer("max_episodes", max_episodes, minimum=1, maximum=MAX_RING)
        while True:
            keys = await self.owned_keys()
            head = await self._check_ahead(await self.read_head(), keys)
            keep = range(max(1, head.last - size + 1), head.last + 1)
            doomed = self._outside(keys, head, keep)
            episodes = sum(1 for k in doomed if not self._is_claim(k) and not self._is_vector(k))
            items = {self.ring_key: str(size), self.gen_key: uuid.uuid4().hex}
            if await self.provider.write_if({self.ring_key: head.raw_ring}, items, doomed):
                break
        self.max = size
        self._synced = False
        log.info(
            "episodic log %r shrunk to %d episodes: %d deleted",
            self.namespace,
            size,
            episodes,
        )
        return episodes

    async def stray_keys(self) -> list[str]:
        """Keys below the log's ring (left by a writer that died before its eviction, by a
        writer whose write landed after it was evicted, or by deepcrew-ai) and stale id
        claims: no read path shows them any more."""
        keys = await self.owned_keys()
        # The head is read after the listing: an episode written in between is inside this
        # head's range, so it can never be mistaken for a stray.
        head = await self._check_ahead(await self.read_head(), keys)
        kept = self.kept_range(head)
        strays = self._outside(keys, head, kept)
        # A vector whose episode is gone (forgotten while a backfill wrote its vector).
        present = set(keys)
        orphans = {
            key: entry
            for key in keys
            if self._is_vector(key)
            and (seq := int(key[len(self.prefix) + 2 :])) in kept
            and (entry := self.entry_key(seq, head.legacy)) not in present
        }
        if orphans:
            # Read again: a listing is not a snapshot, and an episode may have landed with its
            # vector while the keys were listed.
            values = await self.provider.retrieve_many(list(orphans.values()))
            strays += [key for key, value in zip(orphans, values, strict=True) if not value]
        claims = [k for k in keys if self._is_claim(k)]
        values = await self.provider.retrieve_many(claims) if claims else []
        now = time.time()
        for key, value in zip(claims, values, strict=True):
            kind, _, arg = (value or "").partition(":")
            if kind == "seq" and _DIGITS.fullmatch(arg) and int(arg) >= kept.start:
                continue
            if kind == "pending":
                try:
                    if now - float(arg) <= HOLE_GRACE_SECONDS:
                        continue
                except ValueError:
                    pass
            strays.append(key)
        return strays

    async def add_grade(self, grade: Grade) -> int:
        """Append *grade* as a record of its own; return its number. Grades are never
        rewritten."""
        record = grade.to_json()

        def place(
            number: int, values: Mapping[str, str | None]
        ) -> tuple[dict[str, str], list[str]]:
            return {self.grade_key(number): record}, []

        return await self._numbered(
            self.grades_key, place, "g:", fresh=lambda number: [self.grade_key(number)]
        )

    async def count_use(self, seqs: Collection[int]) -> None:
        """Count one use of each episode, then tell readers which counts to read again: an
        entry of the use journal, numbered by ``__uses__`` (the newest ``_USE_JOURNAL`` are
        kept; a reader further behind reads every count)."""
        for seq in seqs:
            key = self.use_key(seq)
            try:
                count = await self.provider.increment(key)
            except CorruptDataError as exc:
                # An unreadable count (edited, or past 18 digits) is no count: it starts over,
                # rather than refusing every use of the episode from now on.
                self._repaired("use count", key, str(exc))
                await self.provider.increment(key, repair=0)
                continue
            if count > _MAX_INDEX:  # past any real count: the next would be refused
                self._repaired("use count", key, f"it holds {count}, past any real count")
                await self.provider.write_if({key: str(count)}, {key: "1"})
        if not seqs:
            return
        record = ",".join(str(s) for s in sorted(set(seqs)))

        def place(number: int, values: Mapping[str, str | None]) -> tuple[Any, Any]:
            trimmed = number - _USE_JOURNAL
            return {self.use_journal_key(number): record}, (
                [self.use_journal_key(trimmed)] if trimmed > 0 else []
            )

        # Numbered like a grade: a counter that is missing (evicted), behind, unreadable or at
        # its limit is moved past the journal entries stored, never back to a number a reader
        # that stays up has synced at (it would not read the counts again).
        await self._numbered(
            self.uses_key, place, "uj:", fresh=lambda number: [self.use_journal_key(number)]
        )

    def _repaired(self, what: str, key: str, why: str) -> None:
        self.counters.recovered_indexes += 1
        log.warning(
            "episodic log %r: %s %s is unreadable (%s); starting it over",
            self.namespace,
            what,
            escape_hidden(key[len(self.prefix) :])[:80],
            why[:120],
        )

    async def grade_keys(self) -> list[str]:
        return [k for k in await self.provider.keys(f"{self.prefix}g:") if self._ours(k)]

    def _is_vector(self, key: str) -> bool:
        return key.startswith(self.prefix) and bool(_VECTOR.fullmatch(key[len(self.prefix) :]))

    def _is_claim(self, key: str) -> bool:
        return key.startswith(self.prefix) and bool(_CLAIM.fullmatch(key[len(self.prefix) :]))

    def _outside(self, keys: Collection[str], head: Head, keep: range) -> list[str]:
        """The episode keys (ours and deepcrew-ai's) of *keys* outside *keep*."""
        live_slots = set()
        if head.legacy:
            live_slots = {self.entry_key(s, head.legacy) for s in keep}
            live_slots |= {self.entry_key(EXTRA + p, head.legacy) for p in head.legacy.extras()}
        doomed = []
        for key in keys:
            if key.startswith(self.prefix):
                rest = key[len(self.prefix) :]
                entry = _ENTRY.fullmatch(rest) or _VECTOR.fullmatch(rest) or _USE.fullmatch(rest)
                if entry is not None:
                    if int(entry.group(1)) < keep.start:
                        doomed.append(key)
                    continue
            if key.startswith(self.legacy_prefix):
                rest = key[len(self.legacy_prefix) :]
                if _SLOT.fullmatch(rest) and key not in live_slots:
                    doomed.append(key)
        return doomed

    def corrupt_keys(self) -> list[str]:
        """The keys of the undecodable records in this memory's range as of the last sync."""
        return [self.entry_key(s, self._legacy) for s in sorted(self._bad)]

    # --- an episode's lifecycle, for the memory above (it builds no key of its own) ------

    async def delete_episodes(
        self,
        seqs: Collection[int],
        *,
        ids: Collection[str] = (),
        grades: Collection[int] = (),
        also: Collection[str] = (),
    ) -> None:
        """Delete the episodes *seqs* with their vectors and use counts, the id claims of
        *ids*, the grade records numbered *grades* and the keys *also* (strays, corrupt
        records this log listed), and tell every reader to reload."""
        claims = [self.claim_key(i) for i in ids]
        numbered = [self.grade_key(n) for n in grades]
        await self.delete_seqs(seqs, also=[*also, *claims, *numbered])

    async def purge(self) -> None:
        """Drop what the store keeps of deleted keys beyond them (a journal's copies)."""
        await self.provider.purge()

    async def stored_bytes(self) -> int:
        """The bytes of every key and value of this namespace, as stored now."""
        keys = await self.owned_keys()
        values = await self.provider.retrieve_many(keys) if keys else []
        return sum(
            len(k.encode("utf-8", "surrogateescape"))
            + len((v or "").encode("utf-8", "surrogateescape"))
            for k, v in zip(keys, values, strict=True)
        )

    async def set_uses(self, seq: int, uses: int) -> None:
        """Set the use count of episode *seq* (a restore from a backup)."""
        key = self.use_key(seq)

        def place(_: int, values: Mapping[str, str | None]) -> tuple[dict[str, str], list[str]]:
            return {key: str(uses)}, []

        # The use counts' own counter is bumped in the same write: readers read them again.
        await self.provider.increment_and_write(self.uses_key, place)

    async def stored_vectors(self, seqs: Sequence[int]) -> list[tuple[str, str, Any] | None]:
        """The vectors stored now for the episodes *seqs*, decoded (``(fingerprint, text
        digest, unit vector)``; ``None``: none, or a record that is not one)."""
        if not seqs:
            return []
        raws = await self.provider.retrieve_many([self.vector_key(s) for s in seqs])
        return [decode_vector(raw) if raw else None for raw in raws]

    async def read_index(self, fn: Callable[[Any], T]) -> T:
        """Run *fn* on a reader of the index the store keeps for this log (a provider with
        ``recall_index``)."""
        return await self.provider.read_index(self.prefix, fn)


async def list_namespaces(provider: MemoryProvider) -> list[str]:
    """The namespaces that hold a log in *provider* (ours, and deepcrew-ai's with an index),
    sorted."""
    found: set[str] = set()
    for key in await provider.keys("episodic:"):
        rest = key[len("episodic:") :]
        encoded, sep, tail = rest.partition(":")
        if sep and (tail in _OWN or _ENTRY.fullmatch(tail) or _CLAIM.fullmatch(tail)):
            found.add(unquote(encoded, errors="surrogateescape"))
        if rest.endswith(":__meta__") and len(rest) > len(":__meta__"):
            found.add(rest[: -len(":__meta__")])
    return sorted(found)


def decode_entry(raw: str) -> Episode:
    """A stored record as an :class:`Episode` (``ValueError`` when it cannot be decoded)."""
    episode = Episode.from_json(raw)
    if not episode.id:
        # Written by deepcrew-ai, which has no ids: derive a stable one from the content.
        digest = hashlib.blake2b(raw.encode("utf-8", "surrogatepass"), digest_size=12)
        episode.id = f"dc-{digest.hexdigest()}"  # a fresh object, not yet shared
    return episode


def parse_ring(raw: str | None) -> int | None:
    """``__max__`` as a ring size, ``None`` when absent or unreadable (the next append rewrites
    it)."""
    if raw and _DIGITS.fullmatch(raw):
        value = int(raw)
        return value if value > 0 else None
    return None


def _legacy_key(rest: str) -> bool:
    return rest == "__meta__" or bool(_SLOT.fullmatch(rest))


def _conflict(namespace: str) -> tuple[str | None, str, bool]:
    """The one key layout deepcrew-ai's cannot tell apart: our ``X``'s ``e:<n>`` entries and
    the slots ``<n>`` of a deepcrew-ai log named ``X:e``. Returns the key whose presence shows
    the other log (read with the head), that log's name, and whether the conflict needs a
    deepcrew-ai index under this namespace too (``X:e`` only reads slots when it has one)."""
    if _SAFE.fullmatch(namespace):
        return f"episodic:{namespace}:e:__meta__", f"{namespace}:e", False
    base, sep, tail = namespace.rpartition(":")
    if sep and tail == "e" and _SAFE.fullmatch(base):
        return f"episodic:{base}:__seq__", base, True
    return None, "", False


# Beyond this a counter or a ring index is garbage, not a log: 10**15 episodes at one a
# microsecond is thirty years.
_MAX_INDEX = 10**15
# deepcrew-ai episodes written after the adoption are cached from this number on (past any
# sequence number of ours, within the 18 digits of a key).
EXTRA = 10**16
# Grades read by number when at most this many are new; more, and the keys are listed instead.
_MAX_GRADE_GAP = 100_000
# After a reset, a missing grade among the newest this many may still be in flight (its writer
# between its counter and its record): it is read again for the grace period. Older ones were
# swept.
_GRADES_IN_FLIGHT = 1024
# Use journal entries kept: a reader that synced within this many uses reads only the counts
# of the episodes they name.
_USE_JOURNAL = 1000
# An append whose counter needs repairing is tried this many times (once is the usual need).
_REPAIRS = 8


def _use_number(raw: str | None) -> int | None:
    return int(raw) if raw and _counter_ok(raw) else None


def _used_seqs(entries: Sequence[str | None]) -> set[int] | None:
    """The sequence numbers named by use journal entries; ``None`` when one is missing or
    unreadable (every count is then read)."""
    found: set[int] = set()
    for entry in entries:
        if not entry:
            return None
        parts = entry.split(",")
        if not all(_DIGITS.fullmatch(p) for p in parts):
            return None
        found.update(int(p) for p in parts)
    return found


def _counter_ok(raw: str) -> bool:
    """Whether a stored counter is a count this library can trust: ASCII digits, not past
    ``_MAX_INDEX`` (a counter near 10**18 is damage: one more would overflow every store)."""
    return bool(_DIGITS.fullmatch(raw)) and int(raw) <= _MAX_INDEX


class CounterAhead(Exception):
    """Raised inside an append when nothing is stored just below the number the counter gave,
    a whole view past the writer's previous record: nothing is written, and the counter is
    checked on the records before the append is made again."""


class CounterBehind(Exception):
    """Raised inside an append when the number the counter gave names a record that is already
    there (or one past any real count): nothing is written, the counter is repaired, and the
    append tried again."""


def _parse_legacy(raw: str | None) -> Legacy | None:
    if not raw:
        return None
    try:
        data = json.loads(raw)
        count, nxt = data["count"], data["next"]
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise CorruptDataError(
            f"deepcrew-ai index __meta__ is unreadable ({safe_message(raw, 60)!r})"
        ) from exc
    if not all(type(v) is int and 0 <= v <= _MAX_INDEX for v in (count, nxt)):
        raise CorruptDataError(
            f"deepcrew-ai index __meta__ is out of range ({safe_message(raw, 60)!r})"
        )
    return Legacy(count, nxt) if count else None


def _with_base(legacy: Legacy | None, raw: str | None) -> Legacy | None:
    """*legacy* with the base this library adopted it at (``__base__``), when recorded."""
    if legacy is None or not raw or not _counter_ok(raw):
        return legacy
    return Legacy(legacy.count, legacy.next, int(raw))


def _parse_seq(raw: str | None, legacy: Legacy | None) -> int:
    if not raw:
        return legacy.shared if legacy else 0
    if not _DIGITS.fullmatch(raw) or int(raw) > _MAX_INDEX:
        raise CorruptDataError(
            f"sequence counter holds {safe_message(raw, 40)!r}, not an integer in range"
        )
    return int(raw)


def _timestamp_of(raw: str | None) -> str:
    try:
        data = json.loads(raw or "")
        return str(data.get("timestamp", "")) if isinstance(data, dict) else ""
    except (ValueError, RecursionError):
        return ""
