"""A PostgreSQL provider: the store a team already runs, backs up and replicates.

Tables, indexes and migrations: see _postgres_schema.py; the recall index: _postgres_index.py.

Why psycopg 3 and its synchronous API, run in worker threads: this library does not assume
asyncio (it runs on trio too, through anyio). psycopg's ``AsyncConnection`` and psycopg_pool's
``AsyncConnectionPool`` wait on asyncio's event loop (``psycopg.waiting.wait_async`` calls
``asyncio.get_running_loop``), and asyncpg is asyncio-only as well. psycopg's synchronous
connections and its thread-safe ``ConnectionPool`` work under any event loop when each call
runs in ``anyio.to_thread``, as the SQLite provider's do; and the recall index is read by
synchronous :class:`~deepcrew_episodic._index.IndexReader` calls inside one worker thread, so
a search is one trip to it, whatever it reads.

How it stays correct:

* A connection per operation, taken from a pool and given back at once: nothing holds one
  between calls. The pool is the provider's (built from *dsn*) or the application's (*pool*).
* Every write is one transaction that first takes a transaction-level advisory lock on the
  schema's name: writers take turns (across processes and hosts), so a compare-and-set reads
  and writes with nothing in between, and the recall index is kept in the same transaction.
  Readers never wait for it: recall reads one repeatable-read snapshot.
* A client killed mid-write leaves nothing: PostgreSQL rolls its transaction back.
* Every psycopg and pool error becomes a :class:`StorageError` in one place
  (:func:`_translated`), the original as ``__cause__``, and no message carries the password.
"""

from __future__ import annotations

import logging
import math
import os
import re
import sys
import threading
import time
import weakref
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import unquote_plus

import anyio.to_thread

if "asyncio" in sys.modules:
    # As the SQLite provider does: anyio loads the running loop's backend on the first call
    # into a worker thread (for asyncio about 25 ms, ssl and socket included), which a fresh
    # process's first call would pay; loaded here, with the provider, when asyncio is loaded.
    import anyio._backends._asyncio

from .._exceptions import (
    ConfigurationError,
    MissingDependencyError,
    StorageError,
    StorageTimeoutError,
    StorageUnavailableError,
)
from .._redact import safe_message
from . import _postgres_index as index
from . import _postgres_schema as schema_
from ._base import Fresh, MemoryProvider, Then, cache_size, differs, next_step
from ._secrets import _redacted, _secrets

try:
    import psycopg
    from psycopg import sql
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingDependencyError(
        "PostgresMemoryProvider needs psycopg 3 and psycopg_pool: "
        "pip install 'deepcrew-episodic[postgres]'"
    ) from exc

__all__ = ["PostgresMemoryProvider"]

# The SQLSTATE classes of a server that cannot serve the call (a connection that failed or was
# lost: no SQLSTATE, or class 08; out of connections or memory: 53; shutting down or starting
# up: 57): StorageUnavailableError.
_UNAVAILABLE = frozenset({"08", "53", "57"})

_SNAPSHOT = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"
_IN_TRANSACTION = (
    psycopg.pq.TransactionStatus.INTRANS,
    psycopg.pq.TransactionStatus.INERROR,
)
# How long the first call waits for the pool's first connection between looks at whether
# the pool failed to connect (see _first_connected).
_FIRST_WAIT = 0.05
# A connection idle for longer is checked as it leaves the pool (one round trip): after a
# server restart or a failover a call gets a live connection, not the dead one of the last.
_CHECK_AFTER_IDLE = 0.1

log = logging.getLogger("deepcrew_episodic")

T = TypeVar("T")


class PostgresMemoryProvider(MemoryProvider):
    """Keeps every key in a table of a PostgreSQL database, and the recall index beside it.

    Parameters
    ----------
    dsn:
        A ``postgresql://`` (or ``postgres://``) URL, or a libpq ``key=value`` string.
    pool:
        A ``psycopg_pool.ConnectionPool`` the application owns, used instead of *dsn*; its
        connections must be in autocommit mode (``kwargs={"autocommit": True}``). It is not
        closed by :meth:`aclose`.
    schema:
        The schema the tables live in, created when absent (``deepcrew_episodic``). Several
        stores can share a database under different schemas.
    max_connections:
        The size of the provider's own pool: more concurrent calls wait for a free connection.
    timeout:
        Seconds a call waits for a connection from the pool before it fails.
    statement_timeout:
        Seconds any one statement may run before the server cancels it (``None``: the
        server's setting); a cancelled call raises :class:`StorageError` and changes nothing.
    recall_cache_bytes:
        The most this provider keeps, for all its namespaces together, of what recalls read
        from the index on the server, reused by the next recall while the store has not
        changed (32 MiB by default; ``0``: nothing is kept, every recall reads the server).

    Example::

        async with PostgresMemoryProvider("postgresql://app@db.internal/agents") as backend:
            memory = EpisodicMemory(backend, namespace="support", max_episodes=100_000)
    """

    shared_across_processes = True
    atomic_increment_and_write = True
    recall_index = True

    def __init__(
        self,
        dsn: str | None = None,
        *,
        pool: ConnectionPool | None = None,
        schema: str = "deepcrew_episodic",
        max_connections: int = 10,
        timeout: float = 30.0,
        statement_timeout: float | None = None,
        recall_cache_bytes: int = 32 << 20,
    ) -> None:
        if (dsn is None) == (pool is None):
            raise ConfigurationError("PostgresMemoryProvider takes a dsn or a pool (one of them)")
        if dsn is not None and not isinstance(dsn, str):
            raise ConfigurationError(f"dsn must be a string, not {type(dsn).__name__}")
        if dsn is not None:
            try:  # parsed here (no I/O): a bad DSN is a mistake, not a server to wait for
                psycopg.conninfo.conninfo_to_dict(dsn)
            except psycopg.Error as exc:
                secrets = _dsn_secrets(dsn)
                shown = _redacted(dsn)
                message = str(exc)
                for secret in sorted(secrets, key=len, reverse=True):
                    shown, message = shown.replace(secret, "***"), message.replace(secret, "***")
                raise ConfigurationError(f"invalid PostgreSQL DSN {shown!r}: {message}") from None
        if not isinstance(schema, str) or not schema or "\x00" in schema:
            raise ConfigurationError(f"schema must be a non-empty name, not {schema!r}")
        if isinstance(max_connections, bool) or not isinstance(max_connections, int):
            raise ConfigurationError(f"max_connections must be an int, not {max_connections!r}")
        if max_connections < 1:
            raise ConfigurationError(f"max_connections must be >= 1, not {max_connections}")
        if timeout <= 0:
            raise ConfigurationError(f"timeout must be > 0 seconds, not {timeout!r}")
        if statement_timeout is not None and statement_timeout <= 0:
            raise ConfigurationError(
                f"statement_timeout must be > 0 seconds or None, not {statement_timeout!r}"
            )
        self.recall_cache_bytes = cache_size(recall_cache_bytes)
        self._dsn = dsn
        self._secrets = _dsn_secrets(dsn) if dsn is not None else set()
        self._owned = pool is None
        self._given = pool
        self._schema = schema
        self._quoted = sql.Identifier(schema).as_string(None)
        self._lock = schema_.lock_id(schema)
        self._max_connections = max_connections
        self._timeout = float(timeout)
        self._statement_timeout = statement_timeout
        self._mutex = threading.Lock()
        self._reached = 0  # the pid whose pool has connected once (see _first_connected)
        self._pool: ConnectionPool | None = None
        self._pid = 0
        self._migrated = False
        self._closed = False
        self._used: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
        self._next: dict[str, int] = {}  # counter -> the value its next increment gives
        _LIVE.add(self)

    def __repr__(self) -> str:
        where = self._hide(_redacted(self._dsn)) if self._dsn is not None else "a pool"
        return f"PostgresMemoryProvider({where!r}, schema={self._schema!r})"

    @property
    def schema(self) -> str:
        """The schema the store's tables live in."""
        return self._schema

    def _forked(self) -> None:
        """In a forked child: the parent's pool (its sockets and threads) is forgotten, never
        used or closed; the child opens its own."""
        self._mutex = threading.Lock()
        self._pool = None

    # --- the contract -----------------------------------------------------------------------

    async def read_revised(
        self, prefix: str, keys: Sequence[str]
    ) -> tuple[list[str | None], str | None]:
        """The values of *keys* and the store's revision, read in one statement (one
        snapshot): the revision moves with every write, the library's or anyone's (see
        _postgres_schema.py), so what recalls kept is used only while nothing changed."""
        wanted = list(keys)
        bound = _keys(wanted)
        s = self._quoted

        def run(conn: Any) -> tuple[list[str | None], str | None]:
            found: dict[bytes, str] = {}
            revision: Any = None
            for key, value, v in conn.execute(
                f"SELECT key, value, NULL::uuid FROM {s}.kv WHERE key = ANY (%s::bytea[]) "
                f"UNION ALL SELECT NULL, NULL, token FROM {s}.ix_revision",
                (bound,),
            ).fetchall():
                if key is None:
                    revision = v
                else:
                    found[bytes(key)] = index.key_text(value)
            return [found.get(b) for b in bound], _revision(revision)

        return await self._run("read", run)

    async def retrieve_many(self, keys: Sequence[str]) -> list[str | None]:
        if not keys:
            return []
        wanted = list(keys)
        bound = _keys(wanted)
        s = self._quoted

        def run(conn: Any) -> list[str | None]:
            found = {
                bytes(k): index.key_text(v)
                for k, v in conn.execute(
                    f"SELECT key, value FROM {s}.kv WHERE key = ANY (%s::bytea[])", (bound,)
                ).fetchall()
            }
            return [found.get(b) for b in bound]

        return await self._run("read", run)

    async def keys(self, prefix: str) -> list[str]:
        if not isinstance(prefix, str):
            raise ConfigurationError(f"a prefix must be a str, not {type(prefix).__name__}")
        start = _key(prefix)
        end = _prefix_end(start)
        s = self._quoted

        def run(conn: Any) -> list[str]:
            if end is None:
                rows = conn.execute(
                    f"SELECT key FROM {s}.kv WHERE key >= %s ORDER BY key", (start,)
                ).fetchall()
            else:
                rows = conn.execute(
                    f"SELECT key FROM {s}.kv WHERE key >= %s AND key < %s ORDER BY key",
                    (start, end),
                ).fetchall()
            found = [k for (raw,) in rows if (k := index.key_text(raw)).startswith(prefix)]
            found.sort()  # byte order and code point order differ only around surrogates
            return found

        return await self._run("keys", run)

    async def write_if(
        self,
        expect: Mapping[str, str | None],
        items: Mapping[str, str],
        delete: Collection[str] = (),
    ) -> bool:
        expected = [(_key(k), v) for k, v in expect.items()]
        pairs, doomed = _change(items, delete)
        if not expected and not pairs and not doomed:
            return True
        s = self._quoted

        def run(conn: Any) -> bool:
            reading = _reading(conn, s, [k for k, _ in expected]) if expected else None
            waiting = index.queued(conn, s).fetchall()  # sends the reads with it
            if reading is not None:
                current = _values(reading.fetchall())
                if any(differs(current.get(k), v) for k, v in expected):
                    return False
            _apply(conn, s, pairs, doomed)
            index.index_records(conn, s, waiting, pairs, doomed)
            return True

        return await self._write("write", run)

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
        first = [key, *(k for k in read if k != key)]
        _keys(first)
        s = self._quoted
        # The keys the next value names are read with the counter when this provider can guess
        # that value (the one after its last): a record then costs no third round trip. A
        # wrong guess (another writer came first) only reads them afterwards.
        guess = self._next.get(key)
        if fresh is not None and guess is not None:
            first += [k for k in fresh(guess) if k not in first]
            _keys(first)

        # One transaction under the writers' lock: the counter, the read keys and what
        # `then` places commit together or not at all, on values no writer changes meanwhile.
        def run(conn: Any) -> int:
            reading = _reading(conn, s, [_key(k) for k in first])
            waiting = index.queued(conn, s).fetchall()  # sends the reads with it
            known = _values(reading.fetchall())
            values = {k: known.get(_key(k)) for k in first}

            def get(name: str) -> str | None:
                if name not in values:
                    bound = _key(name)
                    values[name] = _values(_reading(conn, s, [bound]).fetchall()).get(bound)
                return values[name]

            value, items, delete = next_step(key, get, then, initial, repair, read, fresh)
            pairs, doomed = _change(items, delete)
            _apply(conn, s, pairs, doomed)
            index.index_records(conn, s, waiting, pairs, doomed)
            return value

        value = await self._write("increment", run)
        self._next[key] = value + 1
        return value

    async def read_index(self, prefix: str, fn: Callable[[Any], T]) -> T:
        """Run ``fn(reader)`` in the worker thread on one snapshot of the store (a
        repeatable-read, read-only transaction), with an
        :class:`~deepcrew_episodic._index.IndexReader` for the namespace whose keys start
        with *prefix* (``episodic:<ns>:``). Records written outside the library since the last
        write are indexed first."""
        ns = prefix[len("episodic:") : -1]
        s = self._quoted

        def run(conn: Any) -> T:
            # The snapshot starts with the check for records queued by a write made outside
            # the library: one round trip for both.
            with conn.pipeline():
                conn.execute(_SNAPSHOT)
                waiting = conn.execute(
                    f"SELECT EXISTS (SELECT 1 FROM {s}.ix_pending), (SELECT token FROM {s}.ix_revision)"
                )
            try:
                pending, revision = waiting.fetchone()
                if pending:
                    conn.execute("ROLLBACK")
                    with conn.transaction():
                        conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock,))
                        index.index_pending(conn, s)
                    conn.execute(_SNAPSHOT)
                    (revision,) = conn.execute(f"SELECT token FROM {s}.ix_revision").fetchone()
                reader = index.PostgresIndexReader(conn, s, ns)
                # The revision of this snapshot: what a recall keeps from it is kept only when
                # it is the one read with the log's head (see read_revised).
                reader.revision = _revision(revision)
                return fn(reader)
            finally:
                if conn.info.transaction_status in _IN_TRANSACTION:
                    conn.execute("ROLLBACK")

        return await self._run("recall", run)

    async def aclose(self) -> None:
        def run() -> None:
            with self._mutex:
                pool, self._pool = self._pool, None
                self._closed = True
                if pool is not None and self._owned and self._pid == os.getpid():
                    with self._translated("close"):
                        pool.close()

        await anyio.to_thread.run_sync(run)

    async def purge(self) -> None:
        """``VACUUM`` the store's tables: the rows of deleted records leave the tables' pages
        for the server to reuse. PostgreSQL keeps no promise that their bytes are overwritten
        (free space in a page, the write-ahead log, a replica, a backup keep them until
        reused or rotated): see docs/storage.md."""
        s = self._quoted

        def run(conn: Any) -> None:
            conn.execute(f"VACUUM {s}.kv, {s}.ix_episode, {s}.ix_term, {s}.ix_grade")

        await self._run("purge", run)

    # --- machinery ------------------------------------------------------------------------

    async def _run(self, op: str, fn: Callable[[Any], T]) -> T:
        def run() -> T:
            with self._translated(op), self._connection() as conn:
                return fn(conn)

        return await anyio.to_thread.run_sync(run)

    async def _write(self, op: str, fn: Callable[[Any], T]) -> T:
        """*fn* inside one write transaction that holds the writers' lock, in a pipeline: a
        statement whose result nothing waits for travels with the next one that is waited
        for, so a write costs two round trips (its reads; its writes, the index and the
        commit) whatever it writes. *fn* keeps the recall index in step (index_records)."""

        def run(conn: Any) -> T:
            # BEGIN and COMMIT as statements of the pipeline: psycopg's transaction() block
            # syncs the pipeline as it opens and again as it closes (about a millisecond a
            # write, measured), where these travel with the statements around them.
            try:
                with conn.pipeline():
                    conn.execute("BEGIN")
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock,))
                    conn.execute(schema_.WRITING)
                    conn.execute(schema_.REVISED.replace("{s}", self._quoted))
                    result = fn(conn)
                    conn.execute("COMMIT")
                return result
            finally:
                # (a statement that failed, or fn raising: nothing of it is committed)
                if conn.info.transaction_status in _IN_TRANSACTION:
                    conn.execute("ROLLBACK")

        return await self._run(op, run)

    def _check(self, conn: Any) -> None:
        """The pool's check of a connection it hands out: only of one idle for a while."""
        if time.monotonic() - self._used.get(conn, 0.0) > _CHECK_AFTER_IDLE:
            ConnectionPool.check_connection(conn)

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        pool = self._ready_pool()
        if self._reached != os.getpid() and self._given is None:
            self._first_connected(pool)
        with pool.connection(timeout=self._timeout) as conn:
            try:
                yield from self._migrated_connection(conn)
            finally:
                self._used[conn] = time.monotonic()

    def _migrated_connection(self, conn: Any) -> Iterator[Any]:
        if not conn.autocommit:
            raise ConfigurationError(
                "the pool given to PostgresMemoryProvider must hand out connections in "
                "autocommit mode: ConnectionPool(..., kwargs={'autocommit': True})"
            )
        if not self._migrated:
            schema_.migrate(conn, self._schema, self._quoted)
            self._migrated = True
        yield conn

    def _first_connected(self, pool: ConnectionPool) -> None:
        """Wait for the first connection of the provider's own pool in this process, failing
        at once when the server cannot be reached.

        A pool connects in the background and retries: with a refused port, a host that does
        not resolve or a wrong password, a call would wait the whole *timeout* and fail with
        "no connection", the reason only in psycopg's log. Once the pool's first attempt has
        failed, one direct attempt gives the reason, and the pool is closed rather than left
        retrying (the next call starts over)."""
        deadline = time.monotonic() + self._timeout
        seen = 0  # the pool's failed attempts looked into (one direct attempt each)
        while True:
            try:
                # Returns as soon as the pool holds a connection (no added wait).
                pool.putconn(pool.getconn(timeout=_FIRST_WAIT))
                if pool.max_size != self._max_connections:
                    pool.resize(1, self._max_connections)
                self._reached = os.getpid()
                return
            except PoolTimeout:
                if time.monotonic() >= deadline:
                    raise
            failed = pool.get_stats().get("connections_errors", 0)
            if failed > seen:
                seen = failed
                try:
                    self._connect_directly()
                except psycopg.OperationalError:
                    with self._mutex:
                        if self._pool is pool:
                            self._pool = None
                    pool.close()
                    raise

    def _ready_pool(self) -> ConnectionPool:
        with self._mutex:
            if self._closed:
                raise StorageError("this PostgresMemoryProvider is closed")
            if self._given is not None:
                return self._given
            if self._pool is not None and self._pid == os.getpid():
                return self._pool
            configure = None
            if self._statement_timeout is not None:
                millis = max(1, round(self._statement_timeout * 1000))

                def configure(conn: Any) -> None:
                    conn.execute(f"SET statement_timeout = {millis}")

            pool = ConnectionPool(
                self._dsn or "",
                min_size=1,
                # One until the first connection is made (see _first_connected): a call that
                # waits for it would otherwise make the pool open a second one at once, which
                # a fresh process's first call pays for (the server forks a backend for it).
                max_size=1,
                kwargs={"autocommit": True},
                configure=configure,
                check=self._check,
                timeout=self._timeout,
                open=False,
                name="deepcrew_episodic",
            )
            pool.open(wait=False)
            self._pool, self._pid = pool, os.getpid()
            return pool

    def _connect_directly(self) -> None:
        """Connect once outside the pool, and close (raises libpq's ``OperationalError``
        when the server cannot be reached). libpq's ``connect_timeout`` is *timeout*,
        unless the DSN sets one."""
        options: dict[str, Any] = {"autocommit": True}
        if "connect_timeout" not in psycopg.conninfo.conninfo_to_dict(self._dsn or ""):
            options["connect_timeout"] = max(1, math.ceil(self._timeout))
        psycopg.connect(self._dsn or "", **options).close()

    def _unreachable(self) -> str | None:
        """Why the server cannot be reached now, after a call waited *timeout* for a
        connection from the provider's own pool (``None``: it can be; the pool was busy, or
        it is the application's)."""
        if self._given is not None:
            return None
        try:
            self._connect_directly()
        except psycopg.OperationalError as exc:
            return self._reason(exc)
        return None

    @contextmanager
    def _translated(self, op: str) -> Iterator[None]:
        """The one place where psycopg's and the pool's errors become ours."""
        try:
            yield
        except psycopg.errors.QueryCanceled as exc:
            raise StorageTimeoutError(
                f"postgres {op} failed: the statement ran past its timeout and was cancelled "
                f"(nothing was changed): {self._reason(exc)}"
            ) from None
        except psycopg.errors.LockNotAvailable as exc:
            raise StorageTimeoutError(
                f"postgres {op} failed: a lock was not granted within the server's "
                f"lock_timeout (nothing was changed): {self._reason(exc)}"
            ) from None
        except psycopg.errors.IntegrityConstraintViolation as exc:
            raise StorageError(f"postgres {op} refused: {self._reason(exc)}") from None
        except PoolTimeout as exc:  # (an OperationalError too: before that clause)
            # A pool whose server went away waits out the timeout retrying, its reason only
            # in psycopg's log: one direct attempt tells a server down from a busy pool.
            reason = self._unreachable()
            if reason is not None:
                raise StorageUnavailableError(
                    f"postgres {op} failed: the server could not be reached ({reason}); a "
                    f"write that failed this way changed nothing"
                ) from None
            raise StorageTimeoutError(
                f"postgres {op} failed: no connection within {self._timeout:g} s "
                f"({self._reason(exc)})"
            ) from None
        except psycopg.OperationalError as exc:
            if (exc.sqlstate or "08")[:2] not in _UNAVAILABLE:
                # (a rolled-back transaction, class 40, is an OperationalError too)
                raise StorageError(f"postgres {op} failed: {self._reason(exc)}") from None
            raise StorageUnavailableError(
                f"postgres {op} failed: the server could not be reached or the connection "
                f"was lost ({self._reason(exc)}); a write that failed this way either "
                f"committed or changed nothing"
            ) from None
        except psycopg.Error as exc:
            raise StorageError(f"postgres {op} failed: {self._reason(exc)}") from None

    def _reason(self, exc: BaseException) -> str:
        """What *exc* says, on one line (libpq's messages span several), without a secret."""
        return " ".join(self._hide(str(exc)).split())

    def _hide(self, text: str) -> str:
        for secret in sorted(self._secrets, key=len, reverse=True):
            text = text.replace(secret, "***")
        return text


def split_schema(url: str) -> tuple[str, str | None]:
    """*url* without its ``schema=`` query parameter (ours, not libpq's), and that schema
    (``None``: not given), so that a URL alone (``--store``) can name the schema."""
    base, mark, rest = url.partition("?")
    query, hash_, fragment = rest.partition("#")
    kept: list[str] = []
    schema: str | None = None
    for part in query.split("&") if mark else ():
        name, _, value = part.partition("=")
        if unquote_plus(name) == "schema":
            schema = unquote_plus(value)
        elif part:
            kept.append(part)
    if schema is None:
        return url, None
    return base + ("?" + "&".join(kept) if kept else "") + hash_ + fragment, schema


def _dsn_secrets(dsn: str) -> set[str]:
    """The password of *dsn* in every spelling a message may carry: a URL's (see _open.py)
    and a libpq ``password=`` pair's."""
    found = set(_secrets(dsn))
    try:
        parsed = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        parsed = {}
    password = parsed.get("password")
    if isinstance(password, str) and password:
        found.add(password)
    # Read naively too, for a string libpq cannot parse (its error may quote the rest).
    for quoted, bare in _PASSWORD_PAIR.findall(dsn):
        found.update(v for v in (quoted, bare, quoted.replace("\\'", "'")) if v)
    return found


_PASSWORD_PAIR = re.compile(r"password\s*=\s*(?:'((?:[^'\\]|\\.)*)'?|(\S+))")


def _key(text: str) -> bytes:
    if not isinstance(text, str):
        raise ConfigurationError(
            f"PostgresMemoryProvider stores strings only; got {type(text).__name__} "
            f"{safe_message(repr(text), 60)}"
        )
    try:
        return index.key_bytes(text)
    except UnicodeEncodeError as exc:  # a surrogate no byte decodes to
        raise ConfigurationError(
            f"PostgresMemoryProvider stores text only: {safe_message(text, 60)!r} is not valid "
            f"Unicode text ({exc.reason} at {exc.start})"
        ) from None


def _revision(value: Any) -> str | None:
    """The store's revision as recalls compare it (``None``: none read, nothing is kept)."""
    return None if value is None else f"p{value}"


def _keys(keys: Sequence[str]) -> list[bytes]:
    return [_key(k) for k in keys]


def _change(
    items: Mapping[str, str], delete: Collection[str]
) -> tuple[list[tuple[bytes, bytes]], list[bytes]]:
    pairs = [(_key(k), _key(v)) for k, v in items.items()]
    doomed = [_key(k) for k in delete if k not in items]
    return pairs, doomed


def _reading(conn: Any, s: str, keys: list[bytes]) -> Any:
    """The cursor of a read of *keys* (issued; fetched by the caller)."""
    return conn.execute(f"SELECT key, value FROM {s}.kv WHERE key = ANY (%s::bytea[])", (keys,))


def _values(rows: Sequence[tuple[Any, Any]]) -> dict[bytes, str]:
    return {bytes(k): index.key_text(v) for k, v in rows}


def _apply(conn: Any, s: str, pairs: list[tuple[bytes, bytes]], doomed: list[bytes]) -> None:
    if pairs:
        # An unchanged value is not rewritten (no dead row, no append-only check).
        conn.execute(
            f"INSERT INTO {s}.kv AS kv (key, value) SELECT * FROM unnest(%s::bytea[], "
            f"%s::bytea[]) ON CONFLICT (key) DO UPDATE SET value = excluded.value "
            f"WHERE kv.value IS DISTINCT FROM excluded.value",
            ([k for k, _ in pairs], [v for _, v in pairs]),
        )
    if doomed:
        conn.execute(f"DELETE FROM {s}.kv WHERE key = ANY (%s::bytea[])", (doomed,))


def _prefix_end(raw: bytes) -> bytes | None:
    """The smallest byte string greater than every key that starts with *raw* (``None``:
    there is none)."""
    end = bytearray(raw)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return None


# Every provider of this process, reset in a forked child.
_LIVE: weakref.WeakSet[PostgresMemoryProvider] = weakref.WeakSet()


def _after_fork() -> None:
    for provider in list(_LIVE):
        provider._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
