"""The storage contract: four abstract methods, and everything else built once on them.

A provider implements what the episode log cannot build for itself:

* :meth:`~MemoryProvider.retrieve_many`: read a batch of keys;
* :meth:`~MemoryProvider.keys`: list the keys under a prefix;
* :meth:`~MemoryProvider.write_if`: the one atomic primitive, a compare-and-set over several
  keys that also stores and deletes;
* :meth:`~MemoryProvider.aclose`: release what the provider holds.

The rest (``write``, ``delete``, ``increment``, ``increment_and_write`` and deepcrew-ai's
``store``/``retrieve``/``search``/``clear``) has one portable implementation here, correct on
any provider whose ``write_if`` is atomic. A provider overrides one when it can do the same in
fewer round trips, and declares what its override guarantees (see the class attributes).
deepcrew-ai's own four-method providers go through :func:`as_provider`.

``deepcrew_episodic.testing`` states the contract as a test suite a provider runs in a few lines.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import sys
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, ClassVar, Self, TypeVar

from .._exceptions import ConfigurationError, CorruptDataError, StorageError
from .._mutex import Mutex

__all__ = ["Fresh", "MemoryProvider", "Then", "as_provider"]

T = TypeVar("T")

Then = Callable[[int, Mapping[str, str | None]], tuple[Mapping[str, str], Collection[str]]]
"""``then(new_counter_value, values_read) -> (items to store, keys to delete)``."""

Fresh = Callable[[int], Sequence[str]]
"""``fresh(new_counter_value) -> keys``: the keys a new counter value names (its record), read
with the others so that ``then`` can refuse to overwrite one that is already there."""


class MemoryProvider(ABC):
    """A flat string key/value store that episodic memory is kept in.

    Subclasses implement :meth:`retrieve_many`, :meth:`keys`, :meth:`write_if` and
    :meth:`aclose`; ``deepcrew_episodic.testing.ProviderConformance`` checks that they keep the
    contract. Everything else is built on those four, and may be overridden to save round trips.

    Declared capabilities (class attributes, read by the conformance suite, never guessed):

    * ``shared_across_processes`` (default ``False``): several OS processes may open the same
      store at once, and ``write_if`` stays atomic between them (file, redis, sqlite). The
      conformance suite then runs its multi-process and SIGKILL tests.
    * ``atomic_increment_and_write`` (default ``True``): :meth:`increment_and_write` raises the
      counter and applies the write in one atomic step, as the portable implementation does. A
      provider whose override takes two steps (Redis: a script, then a compare-and-set)
      declares ``False``: a writer that stalls between them can have its episode land below
      the ring, where only ``sweep()`` finds it.
    * ``recall_index`` (default ``False``): the store keeps the recall index beside the log,
      in the same atomic step as every write, and answers :meth:`read_index` (SQLite,
      Redis, PostgreSQL). A memory on it recalls without reading the whole log; on any other provider
      it keeps the index in its own process.
    * ``recall_cache_bytes`` (default 32 MiB): the most a process keeps, for this provider and
      every namespace on it together, of what recalls read from the store's index, between
      recalls (see :meth:`read_revised`; ``0``: nothing is kept). SQLite, Redis and
      PostgreSQL take it as a constructor argument.

    Keys and values are ``str``. A provider that stores bytes returns bytes that are not UTF-8
    decoded with ``surrogateescape`` (lone surrogates U+DC80..U+DCFF) rather than raising, and
    takes such a string passed back to it as the original bytes, so that an undecodable value
    can be found and deleted.

    Providers are async context managers; ``aclose()`` releases connections and handles.

    Example::

        async with FileMemoryProvider("episodes.json") as backend:
            memory = EpisodicMemory(backend, namespace="support")
    """

    shared_across_processes: ClassVar[bool] = False
    atomic_increment_and_write: ClassVar[bool] = True
    recall_index: ClassVar[bool] = False
    recall_cache_bytes: int = 32 << 20

    # --- the contract: what every provider implements ----------------------------------

    @abstractmethod
    async def retrieve_many(self, keys: Sequence[str]) -> list[str | None]:
        """Return the values of *keys*, in order (``None`` for a missing key)."""

    @abstractmethod
    async def keys(self, prefix: str) -> list[str]:
        """Return every key that starts with *prefix* (any character, no wildcard), sorted."""

    @abstractmethod
    async def write_if(
        self,
        expect: Mapping[str, str | None],
        items: Mapping[str, str],
        delete: Collection[str] = (),
    ) -> bool:
        """Atomically: when every key of *expect* holds its expected value (``None``: the key
        is absent or holds ``""``), store *items*, delete the keys of *delete* that are not in
        *items*, and return ``True``; otherwise change nothing and return ``False``.

        With an empty *expect* it is a plain atomic write. It must be atomic between every
        task and thread of the process, and between processes when the provider declares
        ``shared_across_processes``.
        """

    @abstractmethod
    async def aclose(self) -> None:
        """Release connections and handles. Idempotent."""

    async def purge(self) -> None:  # noqa: B027 - nothing to do unless a store keeps copies
        """Remove what the store keeps of deleted values outside its live data (a journal, a
        write-ahead log, temp files), so that deleted text is in none of its files. Called by
        every ``forget``, ``sweep``, ``clear`` and ``shrink``; the default does nothing."""

    async def unsafe_settings(self) -> list[str]:
        """What in the store's own settings can lose or hide records, one sentence each (a
        Redis server that may evict keys, say); ``[]`` when nothing is known to be unsafe.
        Every memory asks once, and logs and counts each answer; the default knows of
        nothing."""
        return []

    async def read_index(self, prefix: str, fn: Callable[[Any], T]) -> T:
        """Run ``fn(reader)`` off the event loop, on one consistent state of the store, with
        an :class:`~deepcrew_episodic._index.IndexReader` for the namespace whose keys start
        with *prefix*; return what it returns. Only for a provider that declares
        ``recall_index``."""
        raise ConfigurationError(f"{type(self).__name__} keeps no recall index in the store")

    async def read_revised(
        self, prefix: str, keys: Sequence[str]
    ) -> tuple[list[str | None], str | None]:
        """``retrieve_many(keys)`` and, read in the same step, the revision of the recall index
        of the namespace whose keys start with *prefix*: a string that changes whenever a write
        may have changed anything a recall reads from that index (``None``: this provider
        tells none, and nothing read from its index is kept between two recalls). A provider
        with ``recall_index`` overrides it to let recalls reuse what they read."""
        return await self.retrieve_many(keys), None

    # --- built on the contract: override to save round trips ----------------------------

    async def write(self, items: Mapping[str, str], delete: Collection[str] = ()) -> None:
        """Store *items* and delete *delete* (except the keys of *items*) in one atomic step."""
        await self.write_if({}, items, delete)

    async def delete(self, keys: Iterable[str]) -> None:
        """Delete *keys*; a missing key is no error."""
        await self.write_if({}, {}, list(keys))

    async def increment_and_write(
        self,
        key: str,
        then: Then,
        *,
        initial: int = 0,
        repair: int | None = None,
        read: Sequence[str] = (),
        fresh: Fresh | None = None,
    ) -> int:
        """Add one to the integer counter *key* (taken as *initial* when absent), then store
        and delete what ``then(new_value, values)`` returns, where *values* maps each key of
        *read*, and each key of ``fresh(new_value)``, to its current value; return the new
        value. A counter is ASCII digits, at most 18 of them.

        The counter, the read keys and the write change together: the write is applied only
        while the counter, the keys of *read* and those of ``fresh(new_value)`` still hold the
        values ``then`` saw, so a decision taken on them (which episode falls out of the ring;
        whether the record the new value names is already there, because the counter fell
        behind its records) is never overtaken. A counter that is not an integer raises
        :class:`CorruptDataError`, or is taken as *repair* when given (inside the same atomic
        step, so two repairers cannot both apply theirs). ``then`` may be called more than
        once; it must not have side effects. An exception ``then`` raises propagates
        unchanged, and nothing but (at most) the counter has changed.

        The portable implementation reads, then applies everything with one :meth:`write_if`
        that expects what it read, and starts over when another writer came first. The keys
        of ``fresh`` are first taken as absent (the usual case), and read when the
        compare-and-set fails. The tasks of one process take turns, so only writers in other
        processes, or a record already at the new value, cause a retry.
        """
        wanted = [key, *(k for k in read if k != key)]
        named: list[str] = []
        async with _process_lock(self):
            while True:
                keys = [*wanted, *(k for k in named if k not in wanted)]
                current = dict(zip(keys, await self.retrieve_many(keys), strict=True))
                value, items, delete = next_step(
                    key, current.get, then, initial, repair, read, fresh
                )
                named = [k for k in (fresh(value) if fresh else ()) if k not in wanted]
                expect = {k: current[k] for k in wanted} | {k: current.get(k) for k in named}
                if await self.write_if(expect, items, delete):
                    return value

    async def increment(self, key: str, *, initial: int = 0, repair: int | None = None) -> int:
        """Add one to the counter *key* and return the new value (see
        :meth:`increment_and_write`, with nothing else to write)."""
        return await self.increment_and_write(key, _nothing, initial=initial, repair=repair)

    # --- deepcrew-ai 0.6's four methods, which its runner and callers use -----------------

    async def store(self, key: str, value: str) -> None:
        """Store *value* under *key*, replacing any previous value."""
        await self.write({key: value})

    async def retrieve(self, key: str) -> str | None:
        """Return the value stored under *key*, or ``None``."""
        return (await self.retrieve_many([key]))[0]

    async def search(self, query: str, top_k: int = 5) -> list[tuple[str, str]]:
        """Return up to *top_k* ``(key, value)`` pairs whose key or value contains *query*
        (case-insensitive), sorted by key. Reads the whole store: deepcrew-ai's semantics,
        kept for its callers; the episode log never calls it."""
        keys = await self.keys("")
        values = await self.retrieve_many(keys)
        pairs = [(k, v) for k, v in zip(keys, values, strict=True) if v is not None]
        return substring_search(pairs, query, top_k)

    async def clear(self) -> None:
        """Remove every entry of this provider (all namespaces)."""
        await self.delete(await self.keys(""))

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def next_step(
    key: str,
    get: Callable[[str], str | None],
    then: Then,
    initial: int,
    repair: int | None,
    read: Sequence[str],
    fresh: Fresh | None = None,
) -> tuple[int, dict[str, str], Collection[str]]:
    """One :meth:`MemoryProvider.increment_and_write` computed on the current values (*get*):
    the new counter value, the items to store (the counter among them) and the keys to delete.
    For providers that read and write inside one atomic step of their own."""
    value = _parse_counter(key, get(key), initial, repair) + 1
    named = [*read, *(fresh(value) if fresh else ())]
    items, delete = then(value, {k: get(k) for k in named})
    return value, {**items, key: str(value)}, delete


def store_path(path: object) -> str | os.PathLike[str]:
    """*path* if it can name a file (a ``str`` or an ``os.PathLike``), else a clear error."""
    if isinstance(path, str) and path:
        return path
    if isinstance(path, os.PathLike):
        return path
    raise ConfigurationError(f"a store path must be a non-empty str or os.PathLike, not {path!r}")


def file_kind(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words (for errors)."""
    kinds = [
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ]
    return next((name for test, name in kinds if test(mode)), "a special file")


def check_regular(path: str | os.PathLike[str], what: str) -> None:
    """Refuse *path* (following symlinks) when it exists and is not a regular file: a FIFO
    would block every open for ever, a device would be read or replaced, a directory is not
    a store. Raises :class:`StorageError` naming the path and what it is."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as exc:
        raise StorageError(f"cannot stat {what} {os.fspath(path)}: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(mode):
        # What the system says of a directory, as it would on opening it for a write.
        cause = (
            IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
            if stat.S_ISDIR(mode)
            else None
        )
        raise StorageError(_not_regular(path, what, mode)) from cause


def open_regular(path: str | os.PathLike[str], flags: int, mode: int, what: str) -> int:
    """``os.open`` for a file that must be a regular one, never blocking on what is not: the
    path is checked first, opened non-blocking (a FIFO swapped in meanwhile cannot hang it)
    and checked again on the descriptor. Raises :class:`StorageError` naming the path."""
    check_regular(path, what)
    extra = os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags | extra, mode)
    except OSError as exc:
        check_regular(path, what)  # the clearer message when something else is there now
        raise StorageError(f"cannot open {what} {os.fspath(path)}: {exc.strerror or exc}") from exc
    try:
        found = os.fstat(fd).st_mode
        if not stat.S_ISREG(found):
            raise StorageError(_not_regular(path, what, found))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _not_regular(path: str | os.PathLike[str], what: str, mode: int) -> str:
    name = os.fspath(path)
    real = os.path.realpath(name)
    if real != os.path.abspath(name):
        name = f"{name} (a link to {real})"
    return (
        f"{name} is {file_kind(mode)}, not a regular file: refusing to use it as "
        f"a {what} (nothing was read or written); give the path of a regular file"
    )


def cache_size(recall_cache_bytes: object) -> int:
    """*recall_cache_bytes* as a provider's constructor takes it: a count of bytes >= 0."""
    if (
        isinstance(recall_cache_bytes, bool)
        or not isinstance(recall_cache_bytes, int)
        or recall_cache_bytes < 0
    ):
        raise ConfigurationError(
            f"recall_cache_bytes must be an int >= 0, not {recall_cache_bytes!r}"
        )
    return recall_cache_bytes


def differs(value: str | None, expected: str | None) -> bool:
    """Whether a stored *value* fails the expectation of :meth:`MemoryProvider.write_if`."""
    if expected is None:
        return value is not None and value != ""
    return value != expected


def substring_search(
    items: Iterable[tuple[str, str]], query: str, top_k: int
) -> list[tuple[str, str]]:
    """deepcrew-ai's ``search`` semantics."""
    q = query.lower()
    matches = [(k, v) for k, v in items if q in k.lower() or q in v.lower()]
    matches.sort(key=lambda kv: kv[0])
    return matches[: max(0, top_k)]


def _nothing(value: int, values: Mapping[str, str | None]) -> tuple[dict[str, str], list[str]]:
    return {}, []


def _parse_counter(key: str, raw: str | None, initial: int, repair: int | None = None) -> int:
    """A counter is ASCII decimal digits, at most 18 (a 64-bit integer in every store): int()
    alone would also take "-1", " 7", "٣" and numbers no store can increment."""
    if raw is None or raw == "":
        return initial
    if _COUNTER.fullmatch(raw):
        return int(raw)
    if repair is not None:
        return repair
    from .._redact import safe_message

    raise CorruptDataError(
        f"counter {key!r} holds {safe_message(raw, 40)!r}, not an integer of at most 18 digits"
    )


_COUNTER = re.compile(r"[0-9]{1,18}")


_locks: weakref.WeakKeyDictionary[object, Mutex] = weakref.WeakKeyDictionary()


def _process_lock(owner: object) -> Mutex:
    """A lock between the tasks of this process, per *owner* (a provider needs no __init__)."""
    lock = _locks.get(owner)
    if lock is None:
        lock = _locks[owner] = Mutex()
    return lock


class _ForeignProvider(MemoryProvider):
    """Adapts a provider with deepcrew-ai's four methods only (``store``, ``retrieve``,
    ``search``, ``clear``) to the contract.

    Its ``write_if`` is atomic between the tasks of this process only (a lock around the read
    and the write, shared by every adapter of the same object), and it cannot delete: a
    deleted key is overwritten with ``""``, which ``write_if`` takes as absent. A batch costs
    one call per key.
    """

    shared_across_processes = False

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def retrieve_many(self, keys: Sequence[str]) -> list[str | None]:
        return [await self.retrieve(key) for key in keys]

    async def keys(self, prefix: str) -> list[str]:
        # deepcrew-ai's search matches the key or the value, ignoring case: filter exactly.
        found = await self.search(prefix, top_k=sys.maxsize)
        return sorted({k for k, _ in found if k.startswith(prefix)})

    async def write_if(
        self,
        expect: Mapping[str, str | None],
        items: Mapping[str, str],
        delete: Collection[str] = (),
    ) -> bool:
        async with _process_lock(self._inner):
            current = await self.retrieve_many(list(expect))
            if any(differs(v, expect[k]) for k, v in zip(expect, current, strict=True)):
                return False
            for key, value in items.items():
                await self._inner.store(key, value)
            for key in delete:
                if key not in items:
                    await self._inner.store(key, "")  # the payload goes; the key stays
            return True

    async def store(self, key: str, value: str) -> None:
        async with _process_lock(self._inner):
            await self._inner.store(key, value)

    async def retrieve(self, key: str) -> str | None:
        value: str | None = await self._inner.retrieve(key)
        return value

    async def search(self, query: str, top_k: int = 5) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = await self._inner.search(query, top_k)
        return found

    async def clear(self) -> None:
        async with _process_lock(self._inner):
            await self._inner.clear()

    async def aclose(self) -> None:
        close = getattr(self._inner, "aclose", None)
        if close is not None:
            await close()


_REQUIRED = ("store", "retrieve", "search", "clear")


def as_provider(backend: object) -> MemoryProvider:
    """Return *backend* as a :class:`MemoryProvider`, adapting one with deepcrew-ai's four
    methods only; anything else raises :class:`ConfigurationError` naming what it lacks."""
    if isinstance(backend, MemoryProvider):
        return backend
    missing = [name for name in _REQUIRED if not callable(getattr(backend, name, None))]
    if missing:
        raise ConfigurationError(
            f"backend {type(backend).__name__} is not a MemoryProvider: "
            f"it lacks {', '.join(missing)} (or subclass MemoryProvider: see docs/storage.md)"
        )
    return _ForeignProvider(backend)
