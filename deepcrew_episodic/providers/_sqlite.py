"""A SQLite provider: the embedded store that scales past a JSON file.

One table, ``kv(key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID``, in a database file that
any number of threads and processes may open at once.

How it stays correct and fast:

* The database runs in WAL mode: readers never block the writer and the writer never blocks
  readers; a process killed mid-write leaves the last committed state (SQLite's own
  journaling), never half a transaction.
* Every write is one ``BEGIN IMMEDIATE`` transaction, so two writers never both hold a read
  lock and then deadlock on the upgrade; a busy database is waited for (``timeout``), not
  failed. ``increment`` reads and upserts the counter inside that transaction: atomic across
  processes.
* ``retrieve_many`` is one query (the keys travel as one JSON array), ``keys(prefix)`` a range
  scan of the primary key, so a batch costs one trip to the worker thread whatever its size.
* All SQLite calls run in a worker thread (``anyio.to_thread``); the event loop never blocks
  on the disk. Any async backend anyio supports works (asyncio, trio).
* A file that is not a SQLite database raises :class:`CorruptDataError` naming it and is never
  written to; a SQLite database of another application is refused, not written into.
* SQLite errors are translated in one place (:func:`_translated`), the original kept as
  ``__cause__``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import anyio.to_thread

from .._exceptions import ConfigurationError, CorruptDataError, StorageError
from ._base import MemoryProvider, _parse_counter, substring_search

__all__ = ["SQLiteMemoryProvider"]

T = TypeVar("T")

# "DCEP" in PRAGMA application_id marks a database as ours; user_version is its schema.
_APPLICATION_ID = 0x44434550
_SCHEMA_VERSION = 1
_SCHEMA = "CREATE TABLE kv (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID"
# SQLite's primary result codes for a file that is not a database, or a damaged one.
_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26


class SQLiteMemoryProvider(MemoryProvider):
    """Keeps every key in a SQLite database at *path*.

    Parameters
    ----------
    path:
        The database file. Created (with its directory) when it does not exist. SQLite keeps
        two sidecar files next to it while it is open (``<path>-wal``, ``<path>-shm``).
    timeout:
        Seconds a write waits for another process's write to finish before it fails with
        :class:`StorageError`.
    fsync:
        Flush every commit to the disk before it returns (``synchronous=FULL``), so it
        survives a power loss as well as a crash. Off (the default, ``synchronous=NORMAL``),
        a commit survives the death of the process, and the database is never corrupted, but
        the last commits may be lost to a power cut; commits are several times faster.

    Example::

        async with SQLiteMemoryProvider("episodes.db") as backend:
            memory = EpisodicMemory(backend, namespace="support", max_episodes=100_000)
            await memory.record(Episode(query="...", response="...", outcome="success"))
    """

    shared_across_processes = True

    def __init__(
        self, path: str | os.PathLike[str], *, timeout: float = 30.0, fsync: bool = False
    ) -> None:
        if timeout <= 0:
            raise ConfigurationError(f"timeout must be > 0 seconds, not {timeout!r}")
        self._path = Path(path)
        self._timeout = float(timeout)
        self._fsync = fsync
        # One connection per provider, used by one worker thread at a time.
        self._mutex = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = 0

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    # --- deepcrew-ai's contract -------------------------------------------------------

    async def store(self, key: str, value: str) -> None:
        await self.write({key: value})

    async def retrieve(self, key: str) -> str | None:
        return (await self.retrieve_many([key]))[0]

    async def search(self, query: str, top_k: int = 5) -> list[tuple[str, str]]:
        def run(conn: sqlite3.Connection) -> list[tuple[str, str]]:
            rows = conn.execute("SELECT key, value FROM kv ORDER BY key").fetchall()
            return substring_search(rows, query, top_k)

        return await self._run("search", run)

    async def clear(self) -> None:
        def run(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                conn.execute("DELETE FROM kv")

        await self._run("clear", run)

    # --- capabilities ---------------------------------------------------------------------

    async def retrieve_many(self, keys: Sequence[str]) -> list[str | None]:
        if not keys:
            return []
        wanted = list(keys)
        _check_strings(wanted, ())

        def run(conn: sqlite3.Connection) -> list[str | None]:
            # One statement for any number of keys: they travel as one JSON array, which
            # also avoids SQLite's limit on bound parameters.
            rows = conn.execute(
                "SELECT kv.key, kv.value FROM json_each(?) AS j JOIN kv ON kv.key = j.value",
                (json.dumps(wanted),),
            ).fetchall()
            found = dict(rows)
            return [found.get(k) for k in wanted]

        return await self._run("read", run)

    async def write(self, items: Mapping[str, str], delete: Collection[str] = ()) -> None:
        _check_strings(items, items.values())
        pairs = list(items.items())
        doomed = [(k,) for k in delete if k not in items]
        if not pairs and not doomed:
            return

        def run(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                _apply(conn, pairs, doomed)

        await self._run("write", run)

    async def delete(self, keys: Iterable[str]) -> None:
        doomed = [(k,) for k in keys]
        if not doomed:
            return

        def run(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                conn.executemany("DELETE FROM kv WHERE key = ?", doomed)

        await self._run("delete", run)

    async def keys(self, prefix: str) -> list[str]:
        end = _prefix_end(prefix)

        def run(conn: sqlite3.Connection) -> list[str]:
            # A range of the primary key: only the matching keys are visited. SQLite's
            # BINARY order is UTF-8 byte order, which is code point order, Python's order.
            if end is None:
                cursor = conn.execute("SELECT key FROM kv WHERE key >= ? ORDER BY key", (prefix,))
            else:
                cursor = conn.execute(
                    "SELECT key FROM kv WHERE key >= ? AND key < ? ORDER BY key", (prefix, end)
                )
            return [row[0] for row in cursor]

        return await self._run("keys", run)

    async def increment(self, key: str, *, initial: int = 0, repair: int | None = None) -> int:
        def run(conn: sqlite3.Connection) -> int:
            with _transaction(conn):
                return _increment(conn, key, initial, repair)

        return await self._run("increment", run)

    async def increment_and_write(
        self,
        key: str,
        then: Callable[[int], tuple[Mapping[str, str], Collection[str]]],
        *,
        initial: int = 0,
        repair: int | None = None,
    ) -> int:
        # One transaction: the counter and what it places commit together or not at all.
        def run(conn: sqlite3.Connection) -> int:
            with _transaction(conn):
                value = _increment(conn, key, initial, repair)
                items, delete = then(value)
                _check_strings(items, items.values())
                _apply(conn, list(items.items()), [(k,) for k in delete if k not in items])
                return value

        return await self._run("increment", run)

    async def aclose(self) -> None:
        def run() -> None:
            with self._mutex:
                conn, self._conn = self._conn, None
                if conn is not None and self._pid == os.getpid():
                    with _translated(self._path, "close"):
                        conn.close()

        await anyio.to_thread.run_sync(run)

    # --- machinery ------------------------------------------------------------------------

    async def _run(self, op: str, fn: Callable[[sqlite3.Connection], T]) -> T:
        def run() -> T:
            with self._mutex, _translated(self._path, op):
                return fn(self._connection())

        return await anyio.to_thread.run_sync(run)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        # A connection must not cross a fork; the parent's stays the parent's (closing it
        # here could release the parent's locks), so it is only forgotten.
        self._conn = None
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create the directory of {self._path}: {exc}") from exc
        conn = sqlite3.connect(
            self._path,
            timeout=self._timeout,
            isolation_level=None,  # transactions are explicit (BEGIN IMMEDIATE)
            check_same_thread=False,  # worker threads vary; self._mutex serialises use
        )
        try:
            # Reading the header comes first: a file that is not a database, or a database
            # that is not ours, is refused before anything is written to it (even the switch
            # to WAL rewrites the header).
            self._check_schema(conn)
            conn.execute("PRAGMA journal_mode = WAL").fetchone()
            conn.execute(f"PRAGMA synchronous = {'FULL' if self._fsync else 'NORMAL'}")
        except BaseException:
            conn.close()
            raise
        self._conn, self._pid = conn, os.getpid()
        return conn

    def _check_schema(self, conn: sqlite3.Connection) -> None:
        """Create our table in an empty database; refuse a database that is not ours."""
        app, version = _stamp(conn)
        if app == _APPLICATION_ID and version == _SCHEMA_VERSION:
            return
        with _transaction(conn):
            app, version = _stamp(conn)  # again, under the write lock
            if app == 0 and version == 0:
                (tables,) = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
                if tables:
                    raise ConfigurationError(
                        f"{self._path} is a SQLite database of another application (it has "
                        f"tables but no deepcrew-episodic store); it was left untouched. "
                        f"Use another file."
                    )
                conn.execute(_SCHEMA)
                conn.execute(f"PRAGMA application_id = {_APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
            elif app != _APPLICATION_ID:
                raise ConfigurationError(
                    f"{self._path} is a SQLite database of another application "
                    f"(application_id {app:#x}); it was left untouched. Use another file."
                )
            elif version > _SCHEMA_VERSION:
                raise ConfigurationError(
                    f"{self._path} was written by a newer deepcrew-episodic (schema {version}, "
                    f"this version reads {_SCHEMA_VERSION}); upgrade deepcrew-episodic."
                )


_UPSERT = "INSERT INTO kv (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value"


def _increment(conn: sqlite3.Connection, key: str, initial: int, repair: int | None) -> int:
    """Add one to the counter *key*; the caller holds the write lock (BEGIN IMMEDIATE)."""
    row = conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
    value = _parse_counter(key, row[0] if row else None, initial, repair) + 1
    conn.execute(_UPSERT, (key, str(value)))
    return value


def _apply(
    conn: sqlite3.Connection, pairs: list[tuple[str, str]], doomed: list[tuple[str]]
) -> None:
    if pairs:
        conn.executemany(_UPSERT, pairs)
    if doomed:
        conn.executemany("DELETE FROM kv WHERE key = ?", doomed)


def _stamp(conn: sqlite3.Connection) -> tuple[int, int]:
    (app,) = conn.execute("PRAGMA application_id").fetchone()
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    return int(app), int(version)


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    # IMMEDIATE takes the write lock up front: a deferred transaction that reads and then
    # writes can fail with "database is locked" without waiting, when another writer holds
    # the lock between the two.
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


@contextmanager
def _translated(path: Path, op: str) -> Iterator[None]:
    """The one place where SQLite's errors become ours."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        if code in (_SQLITE_NOTADB, _SQLITE_CORRUPT) or "could not decode" in str(exc).lower():
            raise CorruptDataError(
                f"{path} is not a readable SQLite database ({exc}); it was left untouched. "
                f"Restore it from a backup or move it aside."
            ) from exc
        raise StorageError(f"sqlite {op} on {path} failed: {exc}") from exc
    except sqlite3.Error as exc:
        raise StorageError(f"sqlite {op} on {path} failed: {exc}") from exc
    except UnicodeEncodeError as exc:  # a lone surrogate: not text SQLite can store
        raise ConfigurationError(
            f"sqlite {op} on {path}: keys and values must be valid Unicode text ({exc})"
        ) from exc
    except OSError as exc:
        raise StorageError(f"sqlite {op} on {path} failed: {exc}") from exc


def _prefix_end(prefix: str) -> str | None:
    """The smallest string greater than every string that starts with *prefix* (``None``
    when there is none: an empty prefix, or only U+10FFFF characters)."""
    chars = list(prefix)
    while chars:
        code = ord(chars[-1]) + 1
        if code <= 0x10FFFF:
            if 0xD800 <= code <= 0xDFFF:  # surrogates cannot be stored; skip past them
                code = 0xE000
            chars[-1] = chr(code)
            return "".join(chars)
        chars.pop()
    return None


def _check_strings(keys: Iterable[object], values: Iterable[object]) -> None:
    for item in (*keys, *values):
        if not isinstance(item, str):
            raise ConfigurationError(
                f"SQLiteMemoryProvider stores strings only; got {type(item).__name__} {item!r:.60}"
            )
