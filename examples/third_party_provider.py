"""Write your own storage provider: episodic memory on the standard library's sqlite3.

A provider implements four methods (``retrieve_many``, ``keys``, ``write_if``, ``aclose``);
the library builds everything else on them, including the atomic counter every record takes.
``deepcrew_episodic.testing.ProviderConformance`` proves that a provider keeps the contract:
``tests/test_third_party_provider.py`` runs the whole suite against this class, in a few lines.

python examples/third_party_provider.py
"""

from __future__ import annotations

import sqlite3
import tempfile
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import anyio.to_thread

from deepcrew_episodic import Episode, EpisodicMemory, StorageError
from deepcrew_episodic.providers import MemoryProvider

T = TypeVar("T")


def _raw(text: str) -> bytes:
    # Keys and values travel as bytes, so that a string holding bytes that were not UTF-8
    # (what "surrogateescape" makes of them) is stored as those bytes and read back unchanged.
    return text.encode("utf-8", "surrogateescape")


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


class Sqlite3Provider(MemoryProvider):
    """Keeps every key in one table of a SQLite database at *path*."""

    # SQLite's locks hold between processes: the conformance suite runs its multi-process
    # and SIGKILL tests on this provider because of this line.
    shared_across_processes = True

    def __init__(self, path: str) -> None:
        self._path = path
        self._lock = threading.Lock()  # one connection, used by one worker thread at a time
        self._conn: sqlite3.Connection | None = None

    async def retrieve_many(self, keys: Sequence[str]) -> list[str | None]:
        def run(conn: sqlite3.Connection) -> list[str | None]:
            rows = [conn.execute("SELECT value FROM kv WHERE key = ?", (_raw(k),)) for k in keys]
            return [None if row is None else _text(row[0]) for row in map(next_row, rows)]

        return await self._run(run)

    async def keys(self, prefix: str) -> list[str]:
        def run(conn: sqlite3.Connection) -> list[str]:
            found = (_text(row[0]) for row in conn.execute("SELECT key FROM kv"))
            return sorted(k for k in found if k.startswith(prefix))

        return await self._run(run)

    async def write_if(
        self,
        expect: Mapping[str, str | None],
        items: Mapping[str, str],
        delete: Collection[str] = (),
    ) -> bool:
        def run(conn: sqlite3.Connection) -> bool:
            conn.execute("BEGIN IMMEDIATE")  # the write lock first: nobody writes in between
            try:
                for key, wanted in expect.items():
                    row = next_row(conn.execute("SELECT value FROM kv WHERE key = ?", (_raw(key),)))
                    held = None if row is None else _text(row[0])
                    if held != wanted and not (wanted is None and held == ""):
                        conn.execute("ROLLBACK")
                        return False
                gone = [(_raw(k),) for k in delete if k not in items]
                conn.executemany("DELETE FROM kv WHERE key = ?", gone)
                stored = [(_raw(k), _raw(v)) for k, v in items.items()]
                conn.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?)", stored)
                conn.execute("COMMIT")
                return True
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

        return await self._run(run)

    async def aclose(self) -> None:
        def run() -> None:
            with self._lock:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None

        await anyio.to_thread.run_sync(run)

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run *fn* on the connection in a worker thread: the event loop never waits on the
        disk. SQLite's errors become the library's StorageError, the original as cause."""

        def locked() -> T:
            with self._lock:
                try:
                    if self._conn is None:
                        self._conn = _connect(self._path)
                    return fn(self._conn)
                except sqlite3.Error as exc:
                    raise StorageError(f"sqlite3 on {self._path}: {exc}") from exc

        return await anyio.to_thread.run_sync(locked)


def _connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")  # readers and the writer do not block each other
    conn.execute("CREATE TABLE IF NOT EXISTS kv (key BLOB PRIMARY KEY, value BLOB NOT NULL)")
    return conn


def next_row(cursor: sqlite3.Cursor) -> tuple[bytes] | None:
    row: tuple[bytes] | None = cursor.fetchone()
    return row


async def main() -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = str(Path(directory) / "episodes.db")
        async with Sqlite3Provider(path) as backend:
            memory = EpisodicMemory(backend, namespace="support-bot", max_episodes=3)
            for query, response in [
                ("Refund a double charge", "Refunded the duplicate charge."),
                ("Reset the 2FA of an account", "Reset 2FA after an identity check."),
                ("Deploy build 41 to staging", "Deployed; smoke tests green."),
                ("Deploy build 42 to staging", "Deployed after a migration."),
            ]:
                await memory.record(Episode(query=query, response=response, outcome="success"))

        # A new provider on the same file: the log is on disk, and the ring kept the newest 3.
        async with Sqlite3Provider(path) as backend:
            memory = EpisodicMemory(backend, namespace="support-bot", max_episodes=3)
            print(f"{len(await memory.load())} episodes kept (a ring of 3, 4 recorded)")
            for episode in await memory.recall("deploy a build to staging", top_k=2):
                print(f"recalled: {episode.query} -> {episode.response}")
            print(f"keys: {await backend.keys('episodic:support-bot:e:')}")


if __name__ == "__main__":
    anyio.run(main)
