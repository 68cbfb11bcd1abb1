"""A Redis provider on redis-py's asyncio client.

Every redis error is translated to :class:`StorageError` in :func:`_translated`, with the
original kept as ``__cause__``. redis-py's client is asyncio-only, so this provider is too.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Collection, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from .._exceptions import ConfigurationError, CorruptDataError, MissingDependencyError, StorageError
from ._base import MemoryProvider, substring_search

try:
    import redis.asyncio as redis_asyncio
    from redis import exceptions as redis_exceptions
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError(
        "RedisMemoryProvider needs redis-py: pip install 'deepcrew-episodic[redis]'"
    ) from exc

__all__ = ["RedisMemoryProvider"]

# Create the counter at `initial` when absent, then INCR it: one atomic step on the server.
_INCREMENT = """
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('SET', KEYS[1], ARGV[1]) end
return redis.call('INCR', KEYS[1])
"""
_SCAN_BATCH = 1000
_GLOB = re.compile(r"([*?\[\]\\])")


class RedisMemoryProvider(MemoryProvider):
    """Keeps every key as a Redis string under *prefix*.

    Parameters
    ----------
    url:
        A ``redis://`` or ``rediss://`` URL.
    prefix:
        Prepended to every key; deepcrew-ai's default, so its logs are read in place.
    client:
        An existing ``redis.asyncio.Redis`` to use instead of connecting to *url*. It is not
        closed by :meth:`aclose`.
    max_connections:
        Size of the connection pool; more concurrent calls wait for a free connection.

    Example::

        async with RedisMemoryProvider("redis://localhost:6379/0") as backend:
            memory = EpisodicMemory(backend, namespace="support")
    """

    shared_across_processes = True

    def __init__(
        self,
        url: str = "redis://localhost:6379/0",
        *,
        prefix: str = "deepcrew:",
        client: Any | None = None,
        max_connections: int = 32,
    ) -> None:
        self._prefix = prefix
        self._pattern_prefix = _GLOB.sub(r"\\\1", prefix)
        if client is not None:
            self._client = client
            self._owns_client = False
        else:
            if not url.startswith(("redis://", "rediss://", "unix://")):
                raise ConfigurationError(
                    f"not a redis URL: {url!r} (expected redis://host:port/db or rediss://...)"
                )
            try:
                # A blocking pool makes a burst of concurrent calls wait for a connection
                # instead of failing with "Too many connections".
                pool = redis_asyncio.BlockingConnectionPool.from_url(
                    url, decode_responses=True, max_connections=max_connections
                )
                self._client = redis_asyncio.Redis(connection_pool=pool)
            except ValueError as exc:
                raise ConfigurationError(f"invalid redis URL {url!r}: {exc}") from exc
            self._owns_client = True
        self._increment = self._client.register_script(_INCREMENT)

    @property
    def client(self) -> Any:
        """The underlying ``redis.asyncio`` client."""
        return self._client

    def _key(self, key: str) -> str:
        return self._prefix + key

    # --- deepcrew-ai's contract -------------------------------------------------------

    async def store(self, key: str, value: str) -> None:
        async with _translated("SET", key):
            await self._client.set(self._key(key), value)

    async def retrieve(self, key: str) -> str | None:
        async with _translated("GET", key):
            return _text(await self._client.get(self._key(key)))

    async def search(self, query: str, top_k: int = 5) -> list[tuple[str, str]]:
        keys = await self.keys("")
        values = await self.retrieve_many(keys)
        pairs = [(k, v) for k, v in zip(keys, values, strict=True) if v is not None]
        return substring_search(pairs, query, top_k)

    async def clear(self) -> None:
        await self.delete(await self.keys(""))

    # --- capabilities ---------------------------------------------------------------------

    async def retrieve_many(self, keys: Sequence[str]) -> list[str | None]:
        if not keys:
            return []
        async with _translated("MGET", keys[0]):
            values = await self._client.mget([self._key(k) for k in keys])
        return [_text(v) for v in values]

    async def write(self, items: Mapping[str, str], delete: Collection[str] = ()) -> None:
        doomed = [self._key(k) for k in delete if k not in items]
        if not items and not doomed:
            return
        first = next(iter(items), None) or next(iter(delete))
        async with (
            _translated("MULTI/EXEC", first),
            self._client.pipeline(transaction=True) as pipe,
        ):
            if items:
                pipe.mset({self._key(k): v for k, v in items.items()})
            if doomed:
                pipe.unlink(*doomed)
            await pipe.execute()

    async def delete(self, keys: Iterable[str]) -> None:
        full = [self._key(k) for k in keys]
        for start in range(0, len(full), _SCAN_BATCH):
            batch = full[start : start + _SCAN_BATCH]
            async with _translated("UNLINK", batch[0]):
                await self._client.unlink(*batch)

    async def keys(self, prefix: str) -> list[str]:
        pattern = self._pattern_prefix + _GLOB.sub(r"\\\1", prefix) + "*"
        cut = len(self._prefix)
        found: list[str] = []
        async with _translated("SCAN", prefix):
            async for key in self._client.scan_iter(match=pattern, count=_SCAN_BATCH):
                found.append(_text(key)[cut:])  # type: ignore[index]
        found.sort()
        return found

    async def increment(self, key: str, *, initial: int = 0) -> int:
        try:
            async with _translated("INCR", key):
                return int(await self._increment(keys=[self._key(key)], args=[initial]))
        except StorageError as exc:
            if "not an integer" in str(exc.__cause__):
                raise CorruptDataError(f"counter {key!r} does not hold an integer") from exc
            raise

    async def aclose(self) -> None:
        if self._owns_client:
            async with _translated("CLOSE", ""):
                await self._client.aclose()
                await self._client.connection_pool.disconnect()


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return value  # type: ignore[no-any-return]


@asynccontextmanager
async def _translated(op: str, key: str) -> AsyncIterator[None]:
    try:
        yield
    except redis_exceptions.RedisError as exc:
        raise StorageError(f"redis {op} failed for key {key!r}: {exc}") from exc
    except OSError as exc:
        raise StorageError(f"redis {op} failed for key {key!r}: {exc}") from exc
