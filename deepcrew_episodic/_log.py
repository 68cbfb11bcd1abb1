"""The episode log: how episodes are laid out on a key/value provider.

Key layout for namespace ``ns`` (every key starts with ``episodic:ns:``)::

    episodic:ns:__seq__      the newest sequence number (an atomic counter)
    episodic:ns:e:<seq>      one episode as JSON, seq = 1, 2, 3, ...
    episodic:ns:__gen__      a random token, replaced by every clear / forget / sweep
    episodic:ns:__meta__     deepcrew-ai 0.6's ring index {"count", "next"} (read, never written)
    episodic:ns:<slot>       deepcrew-ai 0.6's episodes, slot = 0 .. count-1 (read in place)

Appending is ``increment(__seq__)`` then one atomic ``write`` that stores ``e:<seq>`` and deletes
the episode that falls out of the ring (``seq - max_episodes``). Nothing is read-modified-written,
so concurrent writers in any number of processes never lose an episode, and a writer killed
between the two steps leaves a hole, never half an episode.

A log written by deepcrew-ai is adopted without moving anything: its episodes become sequence
numbers ``1..count`` in its oldest-first order, and our counter starts after them.

Readers keep a cache of decoded episodes and bring it up to date with one batch read of the
three index keys plus one batch read of whatever is new, so recall costs a constant number of
round trips however large the log is.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field

from ._episode import Episode
from ._exceptions import ConfigurationError, CorruptDataError
from ._mutex import Mutex
from .providers._base import MemoryProvider

log = logging.getLogger("deepcrew_episodic")

_NAMESPACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")
_ENTRY = re.compile(r"e:(\d+)")
_SLOT = re.compile(r"\d+")
# A key that is missing inside the live range is retried this long: its writer may still be
# between its increment and its write. After that it is a hole left by a dead writer.
HOLE_GRACE_SECONDS = 60.0


def validate_namespace(namespace: object) -> str:
    if not isinstance(namespace, str) or not _NAMESPACE.fullmatch(namespace):
        raise ConfigurationError(
            f"invalid namespace {namespace!r}: use 1-128 characters from letters, digits, "
            f"'_', '.' and '-', starting with a letter or digit (no ':', '*', '?', '[', "
            f"']', '{{', '}}', spaces or other characters that could reach other keys)"
        )
    return namespace


@dataclass(frozen=True)
class Legacy:
    """deepcrew-ai 0.6's ring index. Its oldest episode is at slot ``next % count``."""

    count: int
    next: int

    def slot(self, seq: int) -> int:
        return (self.next + seq - 1) % self.count


@dataclass(frozen=True)
class Head:
    last: int
    gen: str | None
    legacy: Legacy | None
    ring: int | None = None  # the max_episodes of the newest writer, when it recorded one


@dataclass
class Counters:
    """Tolerated failures, counted (each is also logged)."""

    corrupt_records: int = 0
    recovered_indexes: int = 0
    reflection_failures: int = 0
    recall_failures: int = 0
    record_failures: int = 0  # a run's episode could not be stored (the run went on)
    missing_records: int = 0  # a writer took a sequence number and never wrote it (it died)


@dataclass
class Changes:
    """What a sync changed in the cache, for the recall index to follow."""

    reset: bool = False
    added: list[tuple[int, Episode]] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)


class EpisodeLog:
    """A ring buffer of episodes on a provider, with a read cache."""

    def __init__(self, provider: MemoryProvider, namespace: str, max_episodes: int) -> None:
        self.provider = provider
        self.namespace = validate_namespace(namespace)
        if not isinstance(max_episodes, int) or isinstance(max_episodes, bool) or max_episodes < 1:
            raise ConfigurationError(f"max_episodes must be an integer >= 1, not {max_episodes!r}")
        self.max = max_episodes
        self.prefix = f"episodic:{namespace}:"
        self.seq_key = self.prefix + "__seq__"
        self.gen_key = self.prefix + "__gen__"
        self.meta_key = self.prefix + "__meta__"
        self.ring_key = self.prefix + "__max__"
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

    # --- keys ---------------------------------------------------------------------------

    def entry_key(self, seq: int, legacy: Legacy | None) -> str:
        if legacy is not None and seq <= legacy.count:
            return f"{self.prefix}{legacy.slot(seq)}"
        return f"{self.prefix}e:{seq}"

    def ring(self, head: Head) -> int:
        """The ring size in force: ours, or the newest writer's when that is smaller (its
        appends delete what falls out of *its* ring)."""
        return min(self.max, head.ring) if head.ring else self.max

    def live_range(self, head: Head) -> range:
        return range(max(1, head.last - self.ring(head) + 1), head.last + 1)

    # --- reading --------------------------------------------------------------------------

    async def read_head(self) -> Head:
        raw_seq, gen, raw_meta, raw_ring = await self.provider.retrieve_many(
            [self.seq_key, self.gen_key, self.meta_key, self.ring_key]
        )
        ring = int(raw_ring) if raw_ring and raw_ring.isdigit() and int(raw_ring) > 0 else None
        try:
            legacy = _parse_legacy(raw_meta)
            last = _parse_seq(raw_seq, legacy)
        except CorruptDataError as exc:
            head = await self._recover_head(exc, raw_seq, gen or None)
            return Head(head.last, head.gen, head.legacy, ring)
        return Head(last, gen or None, legacy, ring)

    async def _recover_head(
        self, exc: CorruptDataError, raw_seq: str | None, gen: str | None
    ) -> Head:
        """An index record is corrupt: rebuild the index from the keys that exist, losing no
        episode. Nothing is written here; the next append repairs the counter."""
        self.counters.recovered_indexes += 1
        log.warning("episodic log %r: %s; rebuilding the index from its keys", self.namespace, exc)
        keys = await self.provider.keys(self.prefix)
        rest = [k[len(self.prefix) :] for k in keys]
        entries = [int(m.group(1)) for r in rest if (m := _ENTRY.fullmatch(r))]
        slots = sorted(int(r) for r in rest if _SLOT.fullmatch(r))
        legacy: Legacy | None = None
        if slots:
            values = await self.provider.retrieve_many([f"{self.prefix}{s}" for s in slots])
            stamped = [(_timestamp_of(v), s) for s, v in zip(slots, values, strict=True) if v]
            count = slots[-1] + 1
            newest_slot = max(stamped)[1] if stamped else count - 1
            legacy = Legacy(count, (newest_slot + 1) % count)
        try:
            last = int(raw_seq) if raw_seq else 0
        except ValueError:
            last = 0
        last = max([last, *entries, legacy.count if legacy else 0])
        return Head(last, gen, legacy)

    async def sync(self, apply: Callable[[Changes], None] | None = None) -> Changes:
        """Bring the cache up to date with the provider; *apply* sees the changes while the
        cache is still locked, so followers (the recall index) stay in step with it."""
        async with self._lock:
            changes = await self._sync()
            if apply is not None:
                apply(changes)
            return changes

    async def _sync(self) -> Changes:
        # Every await happens before the cache is touched: a sync cancelled part-way (a recall
        # timeout) leaves the cache and its followers exactly as they were.
        head = await self.read_head()
        reset = (
            not self._synced
            or head.gen != self._gen
            or head.legacy != self._legacy
            or head.last < self._synced_last  # the log was re-created under us
        )
        live = self.live_range(head)
        synced_last = 0 if reset else self._synced_last
        holes = {} if reset else {s: h for s, h in self._holes.items() if s in live}
        wanted = [*range(max(live.start, synced_last + 1), live.stop), *holes]
        keys = [self.entry_key(s, head.legacy) for s in wanted]
        values = await self.provider.retrieve_many(keys) if wanted else []

        changes = Changes(reset=reset)
        if reset:
            self._cache.clear()
            self._live_start = 0
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
                first, counts = holes.get(seq, (now, not reset))
                if now - first < HOLE_GRACE_SECONDS:
                    holes[seq] = (first, counts)
                    continue
                holes.pop(seq, None)
                if counts:
                    self.counters.missing_records += 1
                    log.warning(
                        "episodic log %r: sequence %d was taken by a writer that never wrote "
                        "it (it probably died); that episode is lost",
                        self.namespace,
                        seq,
                    )
                continue
            holes.pop(seq, None)
            episode = self._decode(seq, key, raw)
            if episode is not None:
                self._cache[seq] = episode
                changes.added.append((seq, episode))
        self._holes = holes
        self._synced_last = max(synced_last, head.last)
        self._live_start = live.start
        self._gen, self._legacy, self._synced = head.gen, head.legacy, True
        return changes

    def _decode(self, seq: int, key: str, raw: str) -> Episode | None:
        try:
            episode = Episode.from_json(raw)
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
        if not episode.id:
            # Written by deepcrew-ai, which has no ids: derive a stable one from the content.
            digest = hashlib.blake2b(raw.encode(), digest_size=12).hexdigest()
            episode.id = f"dc-{digest}"  # a fresh object, not yet shared
        return episode

    def cached(self) -> Iterator[tuple[int, Episode]]:
        """The cached episodes, oldest first."""
        for seq in sorted(self._cache):
            yield seq, self._cache[seq]

    @property
    def corrupt(self) -> int:
        """Undecodable records in the live range as of the last sync (skipped, left in place)."""
        return len(self._bad)

    # --- writing --------------------------------------------------------------------------

    async def append(self, episode: Episode) -> int:
        if self._synced:
            legacy = self._legacy
        elif self._append_legacy is not None:
            legacy = self._append_legacy[0]
        else:
            # deepcrew-ai's index never changes under us, so one read serves every append.
            legacy = (await self.read_head()).legacy
            self._append_legacy = (legacy,)
        initial = legacy.count if legacy else 0
        body = episode.to_json()

        def place(seq: int, legacy: Legacy | None = legacy) -> tuple[dict[str, str], list[str]]:
            items = {self.entry_key(seq, legacy): body, self.ring_key: str(self.max)}
            if seq == initial + 1:
                # A new counter: a new log (perhaps re-created after a wipe). A new change
                # token makes every reader that cached an older log start over.
                items[self.gen_key] = uuid.uuid4().hex
            evicted = seq - self.max
            return items, [self.entry_key(evicted, legacy)] if evicted >= 1 else []

        try:
            return await self.provider.increment_and_write(self.seq_key, place, initial=initial)
        except CorruptDataError as exc:
            # The counter is unreadable: rebuild its value from the keys that exist. The
            # provider applies the repair inside its atomic step, so when several writers
            # repair at once only the first repair counts and no sequence number is reused.
            head = await self._recover_head(exc, None, None)
            return await self.provider.increment_and_write(
                self.seq_key,
                lambda seq: place(seq, head.legacy),
                initial=head.last,
                repair=head.last,
            )

    async def delete_seqs(self, seqs: list[int], also: Collection[str] = ()) -> None:
        """Delete episodes by sequence number (and the keys *also*) and tell every reader to
        reload."""
        keys = [*(self.entry_key(s, self._legacy) for s in seqs), *also]
        await self.provider.write({self.gen_key: uuid.uuid4().hex}, keys)
        self._synced = False

    async def clear(self) -> None:
        """Delete every key of this namespace except the counter, and invalidate readers."""
        keep = {self.seq_key, self.gen_key}
        doomed = [k for k in await self.provider.keys(self.prefix) if k not in keep]
        await self.provider.write({self.gen_key: uuid.uuid4().hex}, doomed)
        self._synced = False
        self._append_legacy = None

    async def stray_keys(self) -> list[str]:
        """Episode keys below the live range (left by a larger ``max_episodes``, a smaller
        ring of another writer, or a writer that died before its eviction) that no read path
        shows any more."""
        keys = await self.provider.keys(self.prefix)
        # The head is read after the listing: an episode written in between is inside this
        # head's live range, so it can never be mistaken for a stray.
        head = await self.read_head()
        live = self.live_range(head)
        live_slots = {self.entry_key(s, head.legacy) for s in live} if head.legacy else set()
        strays = []
        for key in keys:
            rest = key[len(self.prefix) :]
            entry = _ENTRY.fullmatch(rest)
            if entry is not None:
                if int(entry.group(1)) < live.start:
                    strays.append(key)
            elif _SLOT.fullmatch(rest) and key not in live_slots:
                strays.append(key)
        return strays


def _parse_legacy(raw: str | None) -> Legacy | None:
    if not raw:
        return None
    try:
        data = json.loads(raw)
        count, nxt = int(data["count"]), int(data["next"])
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptDataError(f"deepcrew-ai index __meta__ is unreadable ({raw[:60]!r})") from exc
    if count < 0 or nxt < 0:
        raise CorruptDataError(f"deepcrew-ai index __meta__ is out of range ({raw[:60]!r})")
    return Legacy(count, nxt) if count else None


def _parse_seq(raw: str | None, legacy: Legacy | None) -> int:
    if not raw:
        return legacy.count if legacy else 0
    try:
        value = int(raw)
    except ValueError:
        raise CorruptDataError(f"sequence counter holds {raw[:40]!r}, not an integer") from None
    if value < 0:
        raise CorruptDataError(f"sequence counter is negative ({value})")
    return value


def _timestamp_of(raw: str | None) -> str:
    try:
        data = json.loads(raw or "")
        return str(data.get("timestamp", "")) if isinstance(data, dict) else ""
    except ValueError:
        return ""
