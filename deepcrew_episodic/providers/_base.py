"""The storage contract: a small key/value ABC plus optional capabilities.

The four abstract methods are deepcrew-ai 0.6's ``MemoryProvider`` contract, so any provider
written for it works here. The capabilities below have portable default implementations built
once on those four; a provider overrides them when it can do better (one round trip instead
of many, atomic across processes instead of within one).
"""

from __future__ import annotations

import sys
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, ClassVar, Self

from .._exceptions import ConfigurationError, CorruptDataError
from .._mutex import Mutex

__all__ = ["MemoryProvider", "as_provider", "substring_search"]


class MemoryProvider(ABC):
    """A flat string key/value store that episodic memory is kept in.

    Subclasses implement the four abstract methods (deepcrew-ai's contract). They may override
    the capability methods, and must then declare what they guarantee:

    * ``shared_across_processes``: several OS processes may use the same store at once and the
      capability methods stay atomic between them (file, redis, sqlite). The dict provider is
      private to its process.
    * ``atomic_increment_and_write``: :meth:`increment_and_write` raises the counter and applies
      the write in one atomic step (dict, file, sqlite), so a writer that dies or stalls in
      between cannot leave the counter advanced with nothing written, nor write after a later
      writer has moved on. Redis takes two steps.

    Keys and values are ``str``. A provider that stores bytes returns bytes that are not UTF-8
    decoded with ``surrogateescape`` (lone surrogates U+DC80..U+DCFF) rather than raising, and
    takes such a string passed back to it (to :meth:`delete`, :meth:`write`,
    :meth:`retrieve_many`) as the original bytes, so that an undecodable value can be found
    and deleted.

    Providers are async context managers; ``aclose()`` releases connections and handles.

    Example::

        async with FileMemoryProvider("episodes.json") as backend:
            memory = EpisodicMemory(backend, namespace="support")
    """

    shared_across_processes: ClassVar[bool] = False
    atomic_increment_and_write: ClassVar[bool] = False

    # --- deepcrew-ai's contract -------------------------------------------------------

    @abstractmethod
    async def store(self, key: str, value: str) -> None:
        """Store *value* under *key*, replacing any previous value."""

    @abstractmethod
    async def retrieve(self, key: str) -> str | None:
        """Return the value stored under *key*, or ``None``."""

    @abstractmethod
    async def search(self, query: str, top_k: int = 5) -> list[tuple[str, str]]:
        """Return up to *top_k* ``(key, value)`` pairs whose key or value contains *query*
        (case-insensitive), sorted by key."""

    @abstractmethod
    async def clear(self) -> None:
        """Remove every entry of this provider (all namespaces)."""

    # --- capabilities, with portable defaults -------------------------------------------

    async def retrieve_many(self, keys: Sequence[str]) -> list[str | None]:
        """Return the values of *keys*, in order (``None`` for a missing key)."""
        return [await self.retrieve(key) for key in keys]

    async def write(self, items: Mapping[str, str], delete: Collection[str] = ()) -> None:
        """Store *items* and delete *delete*, as one atomic step where the provider can."""
        for key, value in items.items():
            await self.store(key, value)
        if delete:
            await self.delete(delete)

    async def delete(self, keys: Iterable[str]) -> None:
        """Delete *keys*. The portable default can only overwrite each value with ``""``
        (the payload is gone, the key remains); providers override it to delete for real."""
        for key in keys:
            await self.store(key, "")

    async def keys(self, prefix: str) -> list[str]:
        """Return every key that starts with *prefix*, sorted."""
        found = await self.search(prefix, top_k=sys.maxsize)
        return sorted(k for k, _ in found if k.startswith(prefix))

    async def increment(self, key: str, *, initial: int = 0, repair: int | None = None) -> int:
        """Add one to the integer stored under *key* (taken as *initial* when absent) and
        return the new value. A value that is not an integer raises :class:`CorruptDataError`,
        or is taken as *repair* when given (the repair happens inside the atomic step, so two
        repairers cannot both apply theirs).

        The default is atomic between the tasks of one process only.
        """
        async with self._lock():
            raw = await self.retrieve(key)
            value = _parse_counter(key, raw, initial, repair)
            value += 1
            await self.store(key, str(value))
            return value

    async def write_if(
        self,
        expect: Mapping[str, str | None],
        items: Mapping[str, str],
        delete: Collection[str] = (),
    ) -> bool:
        """Atomically: when every key of *expect* holds its expected value (``None``: the key
        is absent or holds ``""``, which is what the portable :meth:`delete` leaves), store
        *items*, delete *delete* and return ``True``; otherwise change nothing and return
        ``False``. A compare-and-set over several keys.

        The default is atomic between the tasks of one process only; providers shared across
        processes override it with one atomic step (a transaction, a script, a file lock).
        A provider without a real :meth:`delete` leaves ``""`` behind, which ``None`` still
        matches, so a claim made with ``write_if({key: None}, ...)`` can be made again after
        the key is deleted.
        """
        async with self._lock():
            current = await self.retrieve_many(list(expect))
            if any(_differs(v, expect[k]) for k, v in zip(expect, current, strict=True)):
                return False
            await self.write(items, delete)
            return True

    async def increment_and_write(
        self,
        key: str,
        then: Callable[[int, Mapping[str, str | None]], tuple[Mapping[str, str], Collection[str]]],
        *,
        initial: int = 0,
        repair: int | None = None,
        read: Sequence[str] = (),
    ) -> int:
        """Increment the counter *key* (see :meth:`increment`), then apply
        ``then(new_value, values)`` (items to store, keys to delete), where *values* maps each
        key of *read* to its current value; return the new value.

        The write is applied only while the keys of *read* still hold the values ``then`` saw:
        a decision taken on them (which episode falls out of the ring) cannot be overtaken by a
        concurrent change. ``then`` may therefore be called more than once; it must not have
        side effects.

        The default takes two steps (``increment``, then :meth:`write_if`, retried with fresh
        values when they changed): a writer that dies between them leaves the counter advanced
        and nothing written, never a partial write. Providers that can do it all in one atomic
        step (one file replace, one transaction) override it.
        """
        value = await self.increment(key, initial=initial, repair=repair)
        while True:
            current = await self.retrieve_many(list(read)) if read else []
            values = dict(zip(read, current, strict=True))
            items, delete = then(value, values)
            if await self.write_if(values, items, delete):
                return value

    async def aclose(self) -> None:  # noqa: B027 - a no-op unless the provider holds resources
        """Release connections and handles. Idempotent."""

    def _lock(self) -> Mutex:
        """The lock that makes the portable defaults atomic between the tasks of a process."""
        return _process_lock(self)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _differs(value: str | None, expected: str | None) -> bool:
    if expected is None:
        return value is not None and value != ""
    return value != expected


def _parse_counter(key: str, raw: str | None, initial: int, repair: int | None = None) -> int:
    if raw is None or raw == "":
        return initial
    try:
        return int(raw)
    except ValueError:
        if repair is not None:
            return repair
        raise CorruptDataError(f"counter {key!r} holds {raw[:40]!r}, not an integer") from None


_locks: weakref.WeakKeyDictionary[object, Mutex] = weakref.WeakKeyDictionary()


def _process_lock(owner: object) -> Mutex:
    lock = _locks.get(owner)
    if lock is None:
        lock = _locks[owner] = Mutex()
    return lock


class _ForeignProvider(MemoryProvider):
    """Adapts a duck-typed provider (for example one of deepcrew-ai's own) to this ABC."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def store(self, key: str, value: str) -> None:
        await self._inner.store(key, value)

    async def retrieve(self, key: str) -> str | None:
        value: str | None = await self._inner.retrieve(key)
        return value

    async def search(self, query: str, top_k: int = 5) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = await self._inner.search(query, top_k)
        return found

    async def clear(self) -> None:
        await self._inner.clear()

    def _lock(self) -> Mutex:
        # Lock on the wrapped object: every wrapper of one backend shares the lock.
        return _process_lock(self._inner)

    async def aclose(self) -> None:
        close = getattr(self._inner, "aclose", None)
        if close is not None:
            await close()


_REQUIRED = ("store", "retrieve", "search", "clear")


def as_provider(backend: object) -> MemoryProvider:
    """Return *backend* as a :class:`MemoryProvider`, adapting a duck-typed one."""
    if isinstance(backend, MemoryProvider):
        return backend
    missing = [name for name in _REQUIRED if not callable(getattr(backend, name, None))]
    if missing:
        raise ConfigurationError(
            f"backend {type(backend).__name__} is not a MemoryProvider: "
            f"it lacks {', '.join(missing)}"
        )
    return _ForeignProvider(backend)


def substring_search(
    items: Iterable[tuple[str, str]], query: str, top_k: int
) -> list[tuple[str, str]]:
    """deepcrew-ai's ``search`` semantics, shared by every provider here."""
    q = query.lower()
    matches = [(k, v) for k, v in items if q in k.lower() or q in v.lower()]
    matches.sort(key=lambda kv: kv[0])
    return matches[: max(0, top_k)]
