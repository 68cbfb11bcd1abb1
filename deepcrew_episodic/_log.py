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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import anyio

from ._episode import Episode
from ._exceptions import ConfigurationError, CorruptDataError
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


@dataclass
class Counters:
    """Tolerated failures, counted (each is also logged)."""

    corrupt_records: int = 0
    recovered_indexes: int = 0
    reflection_failures: int = 0
    recall_failures: int = 0
    record_failures: int = 0  # a run's episode could not be stored (the run went on)


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
        self.counters = Counters()
        self._cache: dict[int, Episode] = {}
        self._holes: dict[int, float] = {}  # seq -> when first seen missing
        self._bad: set[int] = set()  # seqs whose record cannot be decoded (reported once)
        self._synced_last = 0
        self._live_start = 0  # every cached seq lies in [_live_start, _synced_last]
        self._gen: str | None = None
        self._legacy: Legacy | None = None
        self._keys: dict[int, str] = {}
        self._synced = False
        self._append_legacy: tuple[Legacy | None] | None = None
        self._lock: anyio.Lock | None = None

    # --- keys ---------------------------------------------------------------------------

    def entry_key(self, seq: int, legacy: Legacy | None) -> str:
        if legacy is not None and seq <= legacy.count:
            return f"{self.prefix}{legacy.slot(seq)}"
        return f"{self.prefix}e:{seq}"

    def live_range(self, last: int) -> range:
        return range(max(1, last - self.max + 1), last + 1)

    # --- reading --------------------------------------------------------------------------

    async def read_head(self) -> Head:
        raw_seq, gen, raw_meta = await self.provider.retrieve_many(
            [self.seq_key, self.gen_key, self.meta_key]
        )
        try:
            legacy = _parse_legacy(raw_meta)
            last = _parse_seq(raw_seq, legacy)
        except CorruptDataError as exc:
            return await self._recover_head(exc, raw_seq, gen or None)
        return Head(last, gen or None, legacy)

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
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            changes = await self._sync()
            if apply is not None:
                apply(changes)
            return changes

    async def _sync(self) -> Changes:
        head = await self.read_head()
        changes = Changes()
        if not self._synced or head.gen != self._gen or head.legacy != self._legacy:
            changes.reset = True
            self._cache.clear()
            self._holes.clear()
            self._bad.clear()
            self._synced_last = 0
            self._live_start = 0
        live = self.live_range(head.last)
        # Only what fell out of the ring since the last sync is looked at, not the whole cache,
        # so a sync costs the same at 100 or 100,000 episodes.
        if head.last >= self._synced_last and live.start - self._live_start <= len(self._cache):
            stale = [s for s in range(self._live_start, live.start) if s in self._cache]
        else:
            stale = [s for s in self._cache if s not in live]
        for seq in stale:
            del self._cache[seq]
            changes.removed.append(seq)
        self._holes = {s: t for s, t in self._holes.items() if s in live}
        wanted = [*range(max(live.start, self._synced_last + 1), live.stop), *self._holes]
        if wanted:
            keys = [self.entry_key(s, head.legacy) for s in wanted]
            values = await self.provider.retrieve_many(keys)
            now = time.monotonic()
            for seq, key, raw in zip(wanted, keys, values, strict=True):
                if not raw:
                    first = self._holes.get(seq, now)
                    if now - first < HOLE_GRACE_SECONDS:
                        self._holes[seq] = first
                    else:
                        self._holes.pop(seq, None)
                    continue
                self._holes.pop(seq, None)
                episode = self._decode(seq, key, raw)
                if episode is not None:
                    self._cache[seq] = episode
                    changes.added.append((seq, episode))
        self._synced_last = max(self._synced_last, head.last)
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
        if not episode.id:
            # Written by deepcrew-ai, which has no ids: derive a stable one from the content.
            digest = hashlib.blake2b(raw.encode(), digest_size=12).hexdigest()
            episode = episode.model_copy(update={"id": f"dc-{digest}"})
        return episode

    def cached(self) -> Iterator[tuple[int, Episode]]:
        """The cached episodes, oldest first."""
        for seq in sorted(self._cache):
            yield seq, self._cache[seq]

    @property
    def corrupt(self) -> int:
        """Undecodable records in the live range as of the last sync (skipped, left in place)."""
        live = self.live_range(self._synced_last)
        return sum(1 for seq in self._bad if seq in live)

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
            evicted = seq - self.max
            delete = [self.entry_key(evicted, legacy)] if evicted >= 1 else []
            return {self.entry_key(seq, legacy): body}, delete

        try:
            return await self.provider.increment_and_write(self.seq_key, place, initial=initial)
        except CorruptDataError as exc:
            # The counter is unreadable: rebuild it from the keys that exist, then retry once.
            head = await self._recover_head(exc, None, None)
            await self.provider.store(self.seq_key, str(head.last))
            return await self.provider.increment_and_write(
                self.seq_key, lambda seq: place(seq, head.legacy), initial=head.last
            )

    async def delete_seqs(self, seqs: list[int]) -> None:
        """Delete episodes by sequence number and tell every reader to reload."""
        keys = [self.entry_key(s, self._legacy) for s in seqs]
        await self.provider.write({self.gen_key: uuid.uuid4().hex}, keys)
        self._synced = False

    async def clear(self) -> None:
        """Delete every key of this namespace except the counter, and invalidate readers."""
        keep = {self.seq_key, self.gen_key}
        doomed = [k for k in await self.provider.keys(self.prefix) if k not in keep]
        await self.provider.write({self.gen_key: uuid.uuid4().hex}, doomed)
        self._synced = False
        self._append_legacy = None

    async def stray_keys(self, head: Head) -> list[str]:
        """Episode keys outside the live range (left by a larger ``max_episodes`` or a dead
        writer) that no read path shows any more."""
        live = {self.entry_key(s, head.legacy) for s in self.live_range(head.last)}
        index = {self.seq_key, self.gen_key, self.meta_key}
        return [
            k
            for k in await self.provider.keys(self.prefix)
            if k not in live
            and k not in index
            and (_ENTRY.fullmatch(k[len(self.prefix) :]) or _SLOT.fullmatch(k[len(self.prefix) :]))
        ]


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
