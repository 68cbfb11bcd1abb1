"""An in-process dict provider: for tests, notebooks and short-lived agents."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from ._base import MemoryProvider, differs

__all__ = ["InMemoryProvider"]


class InMemoryProvider(MemoryProvider):
    """Keeps everything in a dict; nothing survives the process.

    No method awaits anything, so each one is atomic between the tasks of the process, and
    ``write`` runs to its end without an event loop (the command line's file snapshot relies
    on it).
    """

    def __init__(self) -> None:
        self._data: dict[str, str] = {}

    async def retrieve_many(self, keys: Sequence[str]) -> list[str | None]:
        get = self._data.get
        return [get(k) for k in keys]

    async def keys(self, prefix: str) -> list[str]:
        return sorted(k for k in self._data if k.startswith(prefix))

    async def write_if(
        self,
        expect: Mapping[str, str | None],
        items: Mapping[str, str],
        delete: Collection[str] = (),
    ) -> bool:
        get = self._data.get
        if any(differs(get(k), v) for k, v in expect.items()):
            return False
        self._apply(items, delete)
        return True

    async def write(self, items: Mapping[str, str], delete: Collection[str] = ()) -> None:
        self._apply(items, delete)

    def _apply(self, items: Mapping[str, str], delete: Collection[str]) -> None:
        self._data.update(items)
        for key in delete:
            if key not in items:
                self._data.pop(key, None)

    async def aclose(self) -> None:
        """Nothing to release."""
