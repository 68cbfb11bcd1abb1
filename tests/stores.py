"""How the test suite opens each provider, in this process or in a worker process.

Each provider kind registers a factory here; the conformance suite is parametrized over
``KINDS``. A provider that does not pass the suite does not ship.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from deepcrew_episodic.providers import FileMemoryProvider, InMemoryProvider, MemoryProvider


@dataclass(frozen=True)
class Store:
    """A provider's location: enough to open the same store again, in any process."""

    kind: str
    target: str

    def open(self) -> MemoryProvider:
        return OPENERS[self.kind](self.target)

    @property
    def shared_across_processes(self) -> bool:
        return self.kind != "dict"


def _open_redis(url: str) -> MemoryProvider:
    from deepcrew_episodic.providers import RedisMemoryProvider

    return RedisMemoryProvider(url)


def _open_cluster(url: str) -> MemoryProvider:
    from deepcrew_episodic.providers import RedisMemoryProvider

    return RedisMemoryProvider(url, cluster=True)


def _open_sqlite(path: str) -> MemoryProvider:
    from deepcrew_episodic.providers import SQLiteMemoryProvider

    return SQLiteMemoryProvider(path)


OPENERS: dict[str, Callable[[str], MemoryProvider]] = {
    "dict": lambda target: InMemoryProvider(),
    "file": lambda target: FileMemoryProvider(target),
    "redis": _open_redis,
    "sqlite": _open_sqlite,
    "cluster": _open_cluster,
}

KINDS: list[str] = ["dict", "file", "redis", "sqlite", "cluster"]
