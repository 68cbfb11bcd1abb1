"""Storage providers. ``RedisMemoryProvider`` is imported on first use, so a bare install never
imports redis-py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._base import MemoryProvider
from ._dict import InMemoryProvider
from ._file import FileMemoryProvider

if TYPE_CHECKING:
    from ._redis import RedisMemoryProvider

__all__ = ["FileMemoryProvider", "InMemoryProvider", "MemoryProvider", "RedisMemoryProvider"]


def __getattr__(name: str) -> Any:
    if name == "RedisMemoryProvider":
        from ._redis import RedisMemoryProvider

        return RedisMemoryProvider
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
