"""Providers that wrap another and watch what the log asks of it: round trips, rewrites."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from ..providers import MemoryProvider
from ..providers._base import Fresh, Then

__all__ = ["Counting", "Rewrites"]


_WRITE_ONCE = re.compile(r"episodic:[^:]+:[eg]:[0-9]+")


class Rewrites(MemoryProvider):
    """Records every write that would change an episode's or a grade's value: one that held
    another value in the store, or that this provider saw written with another value before
    (an atomic step writes keys it cannot read first: a reused sequence number shows here)."""

    def __init__(self, inner: MemoryProvider) -> None:
        self.inner = inner
        self.rewrites: list[str] = []
        self.writes = 0
        self._written: dict[str, str] = {}

    def _note(self, items: Mapping[str, str]) -> None:
        self.writes += len(items)
        for key, value in items.items():
            if _WRITE_ONCE.fullmatch(key):
                if self._written.get(key, value) != value:
                    self.rewrites.append(key)
                self._written[key] = value

    async def _check(self, items: Mapping[str, str]) -> None:
        watched = [k for k in items if _WRITE_ONCE.fullmatch(k)]
        if watched:
            for key, old in zip(watched, await self.inner.retrieve_many(watched), strict=True):
                if old is not None and old != items[key]:
                    self.rewrites.append(key)
        self._note(items)

    async def retrieve_many(self, keys: Sequence[str]) -> list[str | None]:
        return await self.inner.retrieve_many(keys)

    async def keys(self, prefix: str) -> list[str]:
        return await self.inner.keys(prefix)

    async def write_if(
        self,
        expect: Mapping[str, str | None],
        items: Mapping[str, str],
        delete: Collection[str] = (),
    ) -> bool:
        await self._check(items)
        return await self.inner.write_if(expect, items, delete)

    async def write(self, items: Mapping[str, str], delete: Collection[str] = ()) -> None:
        await self._check(items)
        await self.inner.write(items, delete)

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
        written: list[Mapping[str, str]] = []

        def watching(seq: int, values: Mapping[str, str | None]) -> tuple[Any, Any]:
            items, doomed = then(seq, values)
            written[:] = [items]  # a retried step keeps only what it finally wrote
            return items, doomed

        result = await self.inner.increment_and_write(
            key, watching, initial=initial, repair=repair, read=read, fresh=fresh
        )
        for items in written:
            self._note(items)
        return result

    async def aclose(self) -> None:
        """The inner provider belongs to the test."""


class Counting(MemoryProvider):
    """Counts provider calls (each one is a round trip on a networked store)."""

    def __init__(self, inner: MemoryProvider) -> None:
        self.inner = inner
        self.calls: list[str] = []

    async def retrieve_many(self, keys: Sequence[str]) -> list[str | None]:
        self.calls.append("retrieve_many")
        return await self.inner.retrieve_many(keys)

    async def keys(self, prefix: str) -> list[str]:
        self.calls.append("keys")
        return await self.inner.keys(prefix)

    async def write_if(
        self,
        expect: Mapping[str, str | None],
        items: Mapping[str, str],
        delete: Collection[str] = (),
    ) -> bool:
        self.calls.append("write_if")
        return await self.inner.write_if(expect, items, delete)

    async def write(self, items: Mapping[str, str], delete: Collection[str] = ()) -> None:
        self.calls.append("write")
        await self.inner.write(items, delete)

    async def delete(self, keys: Iterable[str]) -> None:
        self.calls.append("delete")
        await self.inner.delete(keys)

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
        self.calls.append("increment_and_write")
        return await self.inner.increment_and_write(
            key, then, initial=initial, repair=repair, read=read, fresh=fresh
        )

    async def aclose(self) -> None:
        """The inner provider belongs to the test."""
