"""An in-process dict provider: for tests, notebooks and short-lived agents."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

from ._base import MemoryProvider, _differs, _parse_counter, substring_search

__all__ = ["InMemoryProvider"]


class InMemoryProvider(MemoryProvider):
    """Keeps everything in a dict; nothing survives the process.

    Every method completes without yielding to the event loop, so each is atomic between
    the tasks of the process.
    """

    atomic_increment_and_write = True

    def __init__(self) -> None:
        self._data: dict[str, str] = {}

    async def store(self, key: str, value: str) -> None:
        self._data[key] = value

    async def retrieve(self, key: str) -> str | None:
        return self._data.get(key)

    async def search(self, query: str, top_k: int = 5) -> list[tuple[str, str]]:
        return substring_search(self._data.items(), query, top_k)

    async def clear(self) -> None:
        self._data.clear()

    async def retrieve_many(self, keys: Sequence[str]) -> list[str | None]:
        get = self._data.get
        return [get(k) for k in keys]

    async def write(self, items: Mapping[str, str], delete: Collection[str] = ()) -> None:
        self._apply(items, delete)

    async def delete(self, keys: Iterable[str]) -> None:
        for key in keys:
            self._data.pop(key, None)

    async def keys(self, prefix: str) -> list[str]:
        return sorted(k for k in self._data if k.startswith(prefix))

    async def increment(self, key: str, *, initial: int = 0, repair: int | None = None) -> int:
        value = _parse_counter(key, self._data.get(key), initial, repair) + 1
        self._data[key] = str(value)
        return value

    async def write_if(
        self,
        expect: Mapping[str, str | None],
        items: Mapping[str, str],
        delete: Collection[str] = (),
    ) -> bool:
        get = self._data.get
        if any(_differs(get(k), v) for k, v in expect.items()):
            return False
        self._apply(items, delete)
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
        # No await in here: nothing can change the read keys between the read and the write.
        value = _parse_counter(key, self._data.get(key), initial, repair) + 1
        get = self._data.get
        items, delete = then(value, {k: get(k) for k in read})
        self._apply(items, delete)
        self._data[key] = str(value)
        return value

    def _apply(self, items: Mapping[str, str], delete: Collection[str]) -> None:
        self._data.update(items)
        for key in delete:
            if key not in items:
                self._data.pop(key, None)
