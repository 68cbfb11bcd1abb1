"""Storage providers, and :func:`open_provider` to open one from a string (``"episodes.db"``,
``"redis://host:6379/0"``, ``"postgresql://host/db"``, ``"memory:"``). ``RedisMemoryProvider``,
``PostgresMemoryProvider`` and ``SQLiteMemoryProvider`` are imported on first use, so a bare
install never imports redis-py or psycopg, and sqlite3 (10 ms) loads only when used."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._base import MemoryProvider
from ._dict import InMemoryProvider
from ._file import FileMemoryProvider
from ._open import open_provider, register_provider

if TYPE_CHECKING:
    from ._postgres import PostgresMemoryProvider
    from ._redis import RedisMemoryProvider
    from ._sqlite import SQLiteMemoryProvider

__all__ = [
    "FileMemoryProvider",
    "InMemoryProvider",
    "MemoryProvider",
    "PostgresMemoryProvider",
    "RedisMemoryProvider",
    "SQLiteMemoryProvider",
    "open_provider",
    "register_provider",
]


def __getattr__(name: str) -> Any:
    if name == "RedisMemoryProvider":
        from ._redis import RedisMemoryProvider

        return RedisMemoryProvider
    if name == "PostgresMemoryProvider":
        from ._postgres import PostgresMemoryProvider

        return PostgresMemoryProvider
    if name == "SQLiteMemoryProvider":
        from ._sqlite import SQLiteMemoryProvider

        return SQLiteMemoryProvider
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
