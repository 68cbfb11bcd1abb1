"""How the test suite opens each provider, in this process or in a worker process.

Each provider kind registers a factory here; the shipped conformance suite
(``deepcrew_episodic.testing``) is run over ``KINDS`` by ``tests/test_conformance.py``. A
provider that does not pass it does not ship. What a test relies on beyond the common
contract is read from the provider class's declared capabilities, never guessed from the
kind's name. ``Store`` is what the suite's ``store`` fixture needs: ``open()``, picklable for
the worker processes, and ``write_raw``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from deepcrew_episodic.providers import FileMemoryProvider, InMemoryProvider, MemoryProvider


@dataclass(frozen=True)
class Store:
    """A provider's location: enough to open the same store again, in any process."""

    kind: str
    target: str

    def open(self) -> MemoryProvider:
        return OPENERS[self.kind](self.target)

    @property
    def provider_class(self) -> type[MemoryProvider]:
        return CLASSES[self.kind]()

    @property
    def shared_across_processes(self) -> bool:
        return self.provider_class.shared_across_processes

    def write_raw(self, key: bytes, value: bytes) -> None:
        """Store *key* and *value* as raw bytes, bypassing the provider: what another program
        (or a disk error) can leave behind. The dict holds Python strings, never bytes."""
        if self.kind not in RAW_WRITERS:
            raise NotImplementedError(f"{self.kind} holds Python strings, never bytes")
        RAW_WRITERS[self.kind](self.target, key, value)


def _open_redis(url: str) -> MemoryProvider:
    from deepcrew_episodic.providers import RedisMemoryProvider

    return RedisMemoryProvider(url)


def _open_cluster(url: str) -> MemoryProvider:
    from deepcrew_episodic.providers import RedisMemoryProvider

    return RedisMemoryProvider(url, cluster=True)


def _open_sqlite(path: str) -> MemoryProvider:
    from deepcrew_episodic.providers import SQLiteMemoryProvider

    return SQLiteMemoryProvider(path)


def _open_postgres(target: str) -> MemoryProvider:
    from deepcrew_episodic.providers import open_provider

    return open_provider(target)  # each test's store is a schema of its own (?schema=)


def _postgres_class() -> type[MemoryProvider]:
    from deepcrew_episodic.providers import PostgresMemoryProvider

    return PostgresMemoryProvider


def _redis_class() -> type[MemoryProvider]:
    from deepcrew_episodic.providers import RedisMemoryProvider

    return RedisMemoryProvider


def _sqlite_class() -> type[MemoryProvider]:
    from deepcrew_episodic.providers import SQLiteMemoryProvider

    return SQLiteMemoryProvider


OPENERS: dict[str, Callable[[str], MemoryProvider]] = {
    "dict": lambda target: InMemoryProvider(),
    "file": lambda target: FileMemoryProvider(target),
    "redis": _open_redis,
    "sqlite": _open_sqlite,
    "cluster": _open_cluster,
    "postgres": _open_postgres,
}
CLASSES: dict[str, Callable[[], type[MemoryProvider]]] = {
    "dict": lambda: InMemoryProvider,
    "file": lambda: FileMemoryProvider,
    "redis": _redis_class,
    "sqlite": _sqlite_class,
    "cluster": _redis_class,
    "postgres": _postgres_class,
}

KINDS: list[str] = ["dict", "file", "redis", "sqlite", "cluster", "postgres"]


# --- raw writers: bytes as another program would leave them --------------------------------


def _raw_file(target: str, key: bytes, value: bytes) -> None:
    path = Path(target)
    text = path.read_bytes().rstrip() if path.exists() else b"{}"
    body = text[1:-1].strip()

    def quoted(raw: bytes) -> bytes:
        return b'"' + raw.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'

    entry = quoted(key) + b": " + quoted(value)
    path.write_bytes(b"{" + (body + b",\n" if body else b"") + entry + b"}\n")


def _raw_sqlite(target: str, key: bytes, value: bytes) -> None:
    import sqlite3

    conn = sqlite3.connect(target)
    with conn:
        conn.execute(
            "INSERT OR REPLACE INTO kv (key, value) VALUES (CAST(? AS TEXT), CAST(? AS TEXT))",
            (key, value),
        )
    conn.close()


def _raw_redis(url: str, key: bytes, value: bytes) -> None:
    import redis

    client = redis.Redis.from_url(url)  # a bytes client: no decoding either way
    client.set(b"deepcrew:" + key, value)
    client.close()


def _raw_cluster(url: str, key: bytes, value: bytes) -> None:
    from redis.cluster import RedisCluster

    first, _, rest = key.partition(b":")
    second, colon, tail = rest.partition(b":")
    client = RedisCluster.from_url(url)
    client.set(b"deepcrew:{" + first + b":" + second + b"}" + colon + tail, value)
    client.close()


def _raw_postgres(target: str, key: bytes, value: bytes) -> None:
    import psycopg
    from psycopg import sql

    from deepcrew_episodic.providers._postgres import split_schema

    dsn, schema = split_schema(target)
    table = sql.Identifier(schema or "deepcrew_episodic", "kv")
    with psycopg.connect(dsn) as conn, conn.transaction():
        # Replaced as another program would: an episode cannot be UPDATEd (append-only).
        conn.execute(sql.SQL("DELETE FROM {} WHERE key = %s").format(table), (key,))
        conn.execute(
            sql.SQL("INSERT INTO {} (key, value) VALUES (%s, %s)").format(table), (key, value)
        )


RAW_WRITERS: dict[str, Callable[[str, bytes, bytes], None]] = {
    "file": _raw_file,
    "sqlite": _raw_sqlite,
    "redis": _raw_redis,
    "cluster": _raw_cluster,
    "postgres": _raw_postgres,
}
