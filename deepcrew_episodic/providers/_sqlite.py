"""A SQLite provider: the embedded store that scales past a JSON file.

One table, ``kv(key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID``, in a database file that
any number of threads and processes may open at once.

How it stays correct and fast:

* The database runs in WAL mode: readers never block the writer and the writer never blocks
  readers; a process killed mid-write leaves the last committed state (SQLite's own
  journaling), never half a transaction.
* Every write is one ``BEGIN IMMEDIATE`` transaction, so two writers never both hold a read
  lock and then deadlock on the upgrade; a busy database is waited for (``timeout``), not
  failed. ``increment``, ``write_if`` and ``increment_and_write`` read what they depend on and
  write inside that transaction: atomic across processes.
* ``retrieve_many`` is one query (the keys travel as one JSON array), ``keys(prefix)`` a range
  scan of the primary key, so a batch costs one trip to the worker thread whatever its size.
* Deleted text is gone from every file of the store when a deleting call returns:
  ``secure_delete`` zeroes it in the database pages, and a ``TRUNCATE`` checkpoint empties the
  ``-wal`` file that still holds the pages as they were. Ring evictions inside
  ``increment_and_write`` skip the checkpoint (it costs two fsyncs); the next explicit delete
  or an automatic checkpoint clears them.
* Stored text that is not UTF-8 (written by another program) is read with
  ``surrogateescape`` instead of failing the whole read, and a string holding such surrogates
  is bound as the original bytes (``CAST(? AS TEXT)``), so that it can be found and deleted.
* All SQLite calls run in a worker thread (``anyio.to_thread``); the event loop never blocks
  on the disk. Any async backend anyio supports works (asyncio, trio).
* A file that is not a SQLite database raises :class:`CorruptDataError` naming it and is never
  written to; a SQLite database of another application is refused, not written into.
* SQLite errors are translated in one place (:func:`_translated`), the original kept as
  ``__cause__``.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import os
import sqlite3
import sys
import threading
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio.to_thread

if "asyncio" in sys.modules:
    # anyio loads the backend of the running event loop on the first call into it (for
    # asyncio about 25 ms: it imports ssl and socket), which a fresh process's first recall
    # would pay; loaded here, with the provider, when the process has asyncio loaded.
    import anyio._backends._asyncio

from .._exceptions import ConfigurationError, CorruptDataError, StorageError, StorageTimeoutError
from .._redact import safe_message
from . import _sqlite_index as index
from ._base import (
    Fresh,
    MemoryProvider,
    Then,
    cache_size,
    check_regular,
    differs,
    next_step,
    open_regular,
    store_path,
)

__all__ = ["SQLiteMemoryProvider"]

log = logging.getLogger("deepcrew_episodic")

T = TypeVar("T")

# "DCEP" in PRAGMA application_id marks a database as ours; user_version is its schema.
_APPLICATION_ID = 0x44434550
_SCHEMA_VERSION = 6
_SCHEMA = "CREATE TABLE kv (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID"
# Version 2: the log is append-only in the schema, not only in the code. An episode's record
# (episodic:<namespace>:e:<seq>) and a grade's (…:g:<n>) can be written once and deleted (forget,
# retention, the ring), never changed: an UPDATE that would change one is refused.
_APPEND_ONLY = (
    "CREATE TRIGGER IF NOT EXISTS episodes_append_only BEFORE UPDATE OF value ON kv "
    "WHEN old.value IS NOT new.value "
    "AND (old.key GLOB 'episodic:*:e:[0-9]*' OR old.key GLOB 'episodic:*:g:[0-9]*') "
    "BEGIN SELECT RAISE(ABORT, 'episodes and grades are append-only: a stored one is never "
    "rewritten'); END"
)
# Version 3: the recall index (see _sqlite_index.py), in tables of its own beside kv. Version 4:
# its posting counts kept without a trigger per posting, the postings table named ix_posting.
# Version 5: the counts kept in counter rows among the postings (no table of their own).
# Version 6: postings written to a table of their own first, merged into ix_post in batches.
_CHECKPOINT_PAGES = 16_000
# SQLite's primary result codes: a lock another connection held past the busy timeout; a
# file that is not a database, or a damaged one.
_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6
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
    cache_bytes:
        The most this provider keeps of the database's pages in memory between calls (SQLite's
        page cache, 8 MiB by default): what a recall from the store's index reads again is
        read from there. A process holds no other copy of the log.
    recall_cache_bytes:
        The most this provider keeps, for all its namespaces together, of what recalls read
        from the index (postings, facts, decoded episodes), reused by the next recall while
        the database has not changed (32 MiB by default; ``0``: nothing is kept).
    progress:
        Called as ``progress(done, total)`` while a store written by an older version is
        indexed for recall on first open (the command line draws a bar with it); the store is
        usable throughout, and a kill loses no more than the batch under way.
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
    atomic_increment_and_write = True
    recall_index = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout: float = 30.0,
        fsync: bool = False,
        progress: Callable[[int, int], None] | None = None,
        cache_bytes: int = 8 << 20,
        recall_cache_bytes: int = 32 << 20,
    ) -> None:
        if timeout <= 0:
            raise ConfigurationError(f"timeout must be > 0 seconds, not {timeout!r}")
        if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, int) or cache_bytes < 0:
            raise ConfigurationError(f"cache_bytes must be an int >= 0, not {cache_bytes!r}")
        self._cache_kib = cache_bytes // 1024
        self.recall_cache_bytes = cache_size(recall_cache_bytes)
        self._serial = 0  # which connection of this process (see _revision)
        self._path = Path(store_path(path))
        self._timeout = float(timeout)
        self._fsync = fsync
        self.progress = progress
        # One connection per provider, used by one worker thread at a time.
        self._mutex = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        _LIVE.add(self)

    def _forked(self) -> None:
        """In a forked child, before any other thread exists: a fresh mutex (the parent's may
        have been held by a thread that does not exist here); the parent's connection is
        forgotten, never used or closed (it must not cross a fork)."""
        self._mutex = threading.Lock()
        self._conn = None

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    # --- the contract -----------------------------------------------------------------------

    async def retrieve_many(self, keys: Sequence[str]) -> list[str | None]:
        if not keys:
            return []
        return await self._run("read", _retrieval(keys))

    async def read_revised(
        self, prefix: str, keys: Sequence[str]
    ) -> tuple[list[str | None], str | None]:
        """The values of *keys* and the database's revision, in one trip to the worker thread:
        the revision changes with every commit, this connection's or another's (so with
        every write, whoever made it: this library, another process, the ``sqlite3`` shell)."""
        read = _retrieval(keys) if keys else None

        def run(conn: sqlite3.Connection) -> tuple[list[str | None], str]:
            return ([] if read is None else read(conn)), self._revision(conn)

        return await self._run("read", run)

    async def keys(self, prefix: str) -> list[str]:
        start = _bind(prefix)
        end = _prefix_end(prefix)

        def run(conn: sqlite3.Connection) -> list[str]:
            # A range of the primary key: only the matching keys are visited. SQLite's BINARY
            # order is the order of the stored bytes, so the bounds are bytes too (see
            # _prefix_end); the check in Python settles the rare key whose bytes start with
            # the prefix's without its text doing so (invalid UTF-8 in the prefix).
            if end is None:
                cursor = conn.execute(_KEYS_FROM, (start,))
            else:
                cursor = conn.execute(_KEYS_RANGE, (start, end))
            found = [row[0] for row in cursor if row[0].startswith(prefix)]
            # Byte order and code point order differ only around lone surrogates.
            found.sort()
            return found

        return await self._run("keys", run)

    async def write_if(
        self,
        expect: Mapping[str, str | None],
        items: Mapping[str, str],
        delete: Collection[str] = (),
    ) -> bool:
        expected = [(_bind(k), v) for k, v in expect.items()]
        pairs, doomed = _bound_change(items, delete)
        if not expected and not pairs and not doomed:
            return True

        def run(conn: sqlite3.Connection) -> bool:
            # The write lock is taken before the read: nobody changes the keys in between.
            with _transaction(conn):
                for bound, value in expected:
                    row = conn.execute(_SELECT_VALUE, (bound,)).fetchone()
                    if differs(row[0] if row else None, value):
                        return False
                _apply(conn, pairs, doomed)
                index.index_pending(conn, written=items)
                # A delete takes its postings in the same transaction (forgotten text leaves
                # every table); a ring eviction's wait for the next merge.
                index.merge(conn, due=not doomed)
            if doomed:
                self._checkpoint(conn)
            return True

        return await self._run("write", run)

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
        bound_key = _bind(key)
        bound_read = {k: _bind(k) for k in read}

        # One transaction: the counter, the read keys and what it places commit together or
        # not at all, so `then` runs once, on values no other writer can change meanwhile.
        def run(conn: sqlite3.Connection) -> int:
            def get(name: str) -> str | None:
                bound = bound_key if name == key else bound_read.get(name) or _bind(name)
                row = conn.execute(_SELECT_VALUE, (bound,)).fetchone()
                return row[0] if row else None

            with _transaction(conn):
                value, items, delete = next_step(key, get, then, initial, repair, read, fresh)
                _apply(conn, *_bound_change(items, delete))
                index.index_pending(conn, written=items)
                index.merge(conn)
                return value

        return await self._run("increment", run)

    async def read_index(self, prefix: str, fn: Callable[[Any], T]) -> T:
        """Run ``fn(reader)`` in the worker thread on one snapshot of the store, with an
        :class:`~deepcrew_episodic._index.IndexReader` for the namespace whose keys start
        with *prefix* (``episodic:<ns>:``). Records written outside the library since the last
        write are indexed first."""
        ns = prefix[len("episodic:") : -1]

        def run(conn: sqlite3.Connection) -> T:
            # Records written outside the library; or deletes made outside it (each leaves a
            # row to wait for a merge, and only the library's writes merge).
            if index.pending(conn) or index.waiting(conn) > 4 * index.MERGE_AT:
                with _transaction(conn):
                    index.index_pending(conn)
                    index.merge(conn)
            # One read transaction: every read of the search sees the same snapshot.
            conn.execute("BEGIN")
            try:
                reader = index.SQLiteIndexReader(conn, ns)
                # The snapshot starts at the first read; the revision read after it names a
                # state no older than the snapshot's (what a recall kept is checked by it).
                conn.execute("SELECT 1 FROM kv LIMIT 1").fetchone()
                reader.revision = self._revision(conn)
                return fn(reader)
            finally:
                conn.execute("ROLLBACK")

        return await self._run("recall", run)

    async def aclose(self) -> None:
        def run() -> None:
            with self._mutex:
                conn, self._conn = self._conn, None
                if conn is not None and self._pid == os.getpid():
                    with _translated(self._path, "close"):
                        conn.close()

        await anyio.to_thread.run_sync(run)

    # --- machinery ------------------------------------------------------------------------

    async def purge(self) -> None:
        """A ``TRUNCATE`` checkpoint: text deleted earlier (ring evictions included) leaves
        the ``-wal`` file."""

        def run(conn: sqlite3.Connection) -> None:
            # The postings of evicted episodes that wait for a merge go first.
            with _transaction(conn):
                index.merge(conn, due=False)
            self._checkpoint(conn)

        await self._run("purge", run)

    def _revision(self, conn: sqlite3.Connection) -> str:
        """What names the database's state for this connection: ``data_version`` moves with
        every commit of another connection, ``total_changes`` with every row this one wrote
        (triggers' rows included); the serial tells connections of this provider apart."""
        (version,) = conn.execute("PRAGMA data_version").fetchone()
        return f"s{self._serial}.{version}.{conn.total_changes}"

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        """Copy the WAL into the database and truncate it: the pages as they were before a
        delete leave the ``-wal`` file (``secure_delete`` has zeroed them in the new ones)."""
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy:
            # A reader in another connection still uses the WAL past the timeout; the delete
            # stands, and the next checkpoint empties the WAL.
            log.warning(
                "sqlite %s: deleted text may remain in %s-wal until the next checkpoint "
                "(another connection is reading)",
                self._path,
                self._path.name,
            )

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
        # SQLite opens the database and its side files itself, blocking: a FIFO at any of
        # them would hang every command for ever, and a device would be read as a database.
        for side in ("-wal", "-shm", "-journal"):
            check_regular(f"{self._path}{side}", "SQLite side file")
        if self._path.exists():
            os.close(open_regular(self._path, os.O_RDONLY, 0, "SQLite database"))
        else:
            # Created private, like the file store: episodes are an agent's whole history.
            # SQLite gives its -wal and -shm files the database file's mode.
            try:
                os.close(os.open(self._path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            except FileExistsError:
                pass  # another process created it first
            except OSError as exc:
                raise StorageError(f"cannot create {self._path}: {exc}") from exc
        conn = sqlite3.connect(
            self._path,
            timeout=self._timeout,
            isolation_level=None,  # transactions are explicit (BEGIN IMMEDIATE)
            check_same_thread=False,  # worker threads vary; self._mutex serialises use
        )
        conn.text_factory = _TEXT
        try:
            # Reading the header comes first: a file that is not a database, or a database
            # that is not ours, is refused before anything is written to it (even the switch
            # to WAL rewrites the header).
            self._check_schema(conn)
            conn.execute("PRAGMA journal_mode = WAL").fetchone()
            conn.execute(f"PRAGMA synchronous = {'FULL' if self._fsync else 'NORMAL'}")
            # A checkpoint every 16,000 pages of log (64 MiB with 4 KiB pages) rather than
            # SQLite's 1,000: a record changes pages that the next records change again (the
            # newest rows of every table, ix_lag), and a checkpoint copies each page once,
            # however often it changed; its fsyncs are paid sixteen times less often. The log
            # is cut back to that size after a checkpoint a long reader made it overrun.
            conn.execute(f"PRAGMA wal_autocheckpoint = {_CHECKPOINT_PAGES}")
            conn.execute(f"PRAGMA journal_size_limit = {_CHECKPOINT_PAGES * 4096}")
            conn.execute("PRAGMA secure_delete = ON")  # a deleted value is zeroed, not left
            conn.execute(f"PRAGMA cache_size = -{self._cache_kib}")  # KiB when negative
            # A delete of a record is one statement that drops its index rows too (triggers):
            # the pages it changes are kept for its rollback in a statement journal, which by
            # default spills to a temporary file past 64 KiB, and a ring eviction passes that.
            conn.execute("PRAGMA temp_store = MEMORY")
            self._catch_up(conn)
        except BaseException:
            conn.close()
            raise
        self._conn, self._pid = conn, os.getpid()
        self._serial = next(_SERIALS)
        return conn

    def _catch_up(self, conn: sqlite3.Connection) -> None:
        """Index the records queued by an upgrade, a batch per transaction (a kill loses one
        batch's work; the rest stays queued for the next open)."""
        total = left = index.pending(conn)
        if not left:
            return
        log.info("sqlite %s: indexing %d records for recall", self._path, total)
        while left:
            with _transaction(conn):
                index.index_pending(conn, index.BATCH)
                index.merge(conn)
                left = index.pending(conn)
            if self.progress is not None:
                self.progress(total - left, total)

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
                conn.execute(_APPEND_ONLY)
                for statement in index.TABLES:
                    conn.execute(statement)
                conn.execute(f"PRAGMA application_id = {_APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
            elif app == _APPLICATION_ID and version in (1, 2):
                # An older store gains in place what it lacks: the append-only trigger (1),
                # the index tables, with every record queued to be indexed (_catch_up).
                conn.execute(_APPEND_ONLY)
                for statement in index.TABLES:
                    conn.execute(statement)
                conn.execute(index.QUEUE_EVERY_RECORD)
                conn.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
            elif app == _APPLICATION_ID and version in (3, 4, 5):
                # The index is there and exact: its triggers change, its postings table is
                # renamed (3, 5), takes the counts (4) and a table of postings on their way
                # (5), in this transaction; nothing is indexed again.
                steps = {
                    3: (*index.UPGRADE_FROM_3, *index.UPGRADE_FROM_4, *index.UPGRADE_FROM_5),
                    4: (*index.UPGRADE_FROM_4, *index.UPGRADE_FROM_5),
                    5: index.UPGRADE_FROM_5,
                }[version]
                for statement in (*steps, *index.TABLES):
                    conn.execute(statement)
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


# Every key and value is bound through CAST(? AS TEXT): a str binds as text, and the bytes of
# a string that held undecodable bytes (see _bind) as the same text they were read from.
_UPSERT = (
    "INSERT INTO kv (key, value) VALUES (CAST(? AS TEXT), CAST(? AS TEXT)) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)
_SELECT_VALUE = "SELECT value FROM kv WHERE key = CAST(? AS TEXT)"
_DELETE = "DELETE FROM kv WHERE key = CAST(? AS TEXT)"
_KEYS_FROM = "SELECT key FROM kv WHERE key >= CAST(? AS TEXT) ORDER BY key"
_KEYS_RANGE = (
    "SELECT key FROM kv WHERE key >= CAST(? AS TEXT) AND key < CAST(? AS TEXT) ORDER BY key"
)
_Bound = str | bytes


def _text(raw: bytes) -> str:
    """SQLite's text as ``str``; bytes that are not UTF-8 become lone surrogates."""
    return raw.decode("utf-8", "surrogateescape")


# _text without a Python frame per value (a search reads thousands of them).
_TEXT = functools.partial(str, encoding="utf-8", errors="surrogateescape")


def _bind(text: str) -> _Bound:
    """*text* as SQLite should get it: itself, or the original bytes when it holds the lone
    surrogates that ``surrogateescape`` made of bytes that are not UTF-8."""
    if not isinstance(text, str):
        _check_strings((text,), ())
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            return text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as exc:  # a surrogate no byte decodes to
            raise ConfigurationError(
                f"SQLiteMemoryProvider stores text only: {safe_message(text, 60)!r} is not valid Unicode "
                f"text ({exc.reason} at {exc.start})"
            ) from None
    return text


def _retrieval(keys: Sequence[str]) -> Callable[[sqlite3.Connection], list[str | None]]:
    """The read of *keys* (checked here, on the caller's thread), to run on the connection."""
    wanted = list(keys)
    _check_strings(wanted, ())
    # Keys JSON cannot carry to SQLite as they are (a NUL, bytes that are not UTF-8) are
    # looked up one by one; the rest travel together.
    odd = [k for k in wanted if not _json_safe(k)]
    plain = [k for k in wanted if _json_safe(k)] if odd else wanted
    odd_bound = [(k, _bind(k)) for k in odd]

    def run(conn: sqlite3.Connection) -> list[str | None]:
        # One statement for any number of keys: they travel as one JSON array, which
        # also avoids SQLite's limit on bound parameters.
        found = dict(
            conn.execute(
                "SELECT kv.key, kv.value FROM json_each(?) AS j JOIN kv ON kv.key = j.value",
                (json.dumps(plain, ensure_ascii=False),),
            ).fetchall()
        )
        for key, bound in odd_bound:
            row = conn.execute(_SELECT_VALUE, (bound,)).fetchone()
            if row is not None:
                found[key] = row[0]
        return [found.get(k) for k in wanted]

    return run


def _json_safe(key: str) -> bool:
    """Whether *key* survives a trip through SQLite's JSON functions unchanged."""
    if key.isascii():
        return "\x00" not in key
    return "\x00" not in key and not any("\udc80" <= c <= "\udcff" for c in key)


def _bound_change(
    items: Mapping[str, str], delete: Collection[str]
) -> tuple[list[tuple[_Bound, _Bound]], list[tuple[_Bound]]]:
    _check_strings(items, items.values())
    pairs = [(_bind(k), _bind(v)) for k, v in items.items()]
    doomed = [(_bind(k),) for k in delete if k not in items]
    return pairs, doomed


def _apply(
    conn: sqlite3.Connection,
    pairs: list[tuple[_Bound, _Bound]],
    doomed: list[tuple[_Bound]],
) -> None:
    if pairs:
        conn.executemany(_UPSERT, pairs)
    if doomed:
        conn.executemany(_DELETE, doomed)


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
        if code in (_SQLITE_BUSY, _SQLITE_LOCKED):
            raise StorageTimeoutError(
                f"sqlite {op} on {path} failed: the database stayed locked by another "
                f"connection past the timeout (nothing was changed): {exc}"
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


def _prefix_end(prefix: str) -> bytes | None:
    """The smallest byte string greater than the bytes of every key that starts with *prefix*
    (``None`` when there is none: an empty prefix, or one of 0xFF bytes only). Computed on the
    bytes SQLite compares, so any character works, whatever its UTF-8 length; the bound need
    not be valid UTF-8 since it is only compared."""
    raw = bytearray(prefix.encode("utf-8", "surrogateescape"))
    while raw:
        if raw[-1] < 0xFF:
            raw[-1] += 1
            return bytes(raw)
        raw.pop()
    return None


def _check_strings(keys: Iterable[object], values: Iterable[object]) -> None:
    for item in (*keys, *values):
        if not isinstance(item, str):
            raise ConfigurationError(
                f"SQLiteMemoryProvider stores strings only; got {type(item).__name__} "
                f"{safe_message(repr(item), 60)}"
            )


# Every provider of this process, reset in a forked child while it is still single-threaded.
_LIVE: weakref.WeakSet[SQLiteMemoryProvider] = weakref.WeakSet()
# Connection serials, unique in the process: a revision names one connection's view.
_SERIALS = itertools.count(1)


def _after_fork() -> None:
    for provider in list(_LIVE):
        provider._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
