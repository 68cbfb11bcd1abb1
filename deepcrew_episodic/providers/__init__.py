"""Storage providers. ``RedisMemoryProvider`` and ``SQLiteMemoryProvider`` are imported on first
use, so a bare install never imports redis-py, and sqlite3 (10 ms) loads only when used."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._base import MemoryProvider
from ._dict import InMemoryProvider
from ._file import FileMemoryProvider

if TYPE_CHECKING:
    from ._redis import RedisMemoryProvider
    from ._sqlite import SQLiteMemoryProvider

__all__ = [
    "FileMemoryProvider",
    "InMemoryProvider",
    "MemoryProvider",
    "RedisMemoryProvider",
    "SQLiteMemoryProvider",
]


def __getattr__(name: str) -> Any:
    if name == "RedisMemoryProvider":
        from ._redis import RedisMemoryProvider

        return RedisMemoryProvider
    if name == "SQLiteMemoryProvider":
        from ._sqlite import SQLiteMemoryProvider

        return SQLiteMemoryProvider
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
