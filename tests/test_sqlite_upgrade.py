"""A SQLite store written before the recall index existed is upgraded in place on its first
open: every record indexed, in batches of their own transactions, so that a process killed part
way leaves the rest queued (never a half-built index in use), and the next open finishes."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sqlite3
from pathlib import Path

import pytest

from deepcrew_episodic import ConfigurationError, EpisodicMemory
from deepcrew_episodic.providers import SQLiteMemoryProvider
from deepcrew_episodic.providers._sqlite_index import BATCH

pytestmark = pytest.mark.anyio

NOW = 1_800_000_000.0


def clock() -> float:
    return NOW


def _older_store(path: Path, episodes: int) -> None:
    """A store as the version before the index wrote it: kv, its trigger, schema 2."""
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE kv (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID"
    )
    conn.execute("PRAGMA application_id = 1145259344")  # "DCEP"
    conn.execute("PRAGMA user_version = 2")
    rows = {
        "episodic:default:__seq__": str(episodes),
        "episodic:default:__max__": str(episodes),
        "episodic:default:__gen__": "g1",
        "episodic:default:__base__": "0",
    }
    for seq in range(1, episodes + 1):
        rows[f"episodic:default:e:{seq}"] = json.dumps(
            {
                "id": f"ep{seq}",
                "query": f"sync the ledger for shop {seq % 97}",
                "response": "done",
                "outcome": "failure" if seq % 5 == 0 else "success",
                "tags": [f"shop{seq % 7}"],
                "timestamp": f"2026-11-{1 + seq % 28:02d}T08:00:00Z",
            }
        )
    conn.executemany("INSERT INTO kv VALUES (?, ?)", rows.items())
    conn.commit()
    conn.close()


def _index_counts(path: Path) -> tuple[int, int, int]:
    conn = sqlite3.connect(path)
    try:
        (pending,) = conn.execute("SELECT count(*) FROM ix_pending").fetchone()
        (indexed,) = conn.execute("SELECT count(*) FROM ix_episode").fetchone()
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        return int(pending), int(indexed), int(version)
    finally:
        conn.close()


async def _same_answers(path: Path, query: str) -> list[str]:
    async with SQLiteMemoryProvider(path) as backend:
        fresh = EpisodicMemory(backend, clock=clock, max_episodes=100_000)
        from_store = await fresh.explain(query, 5, intent="what_failed")
        assert not fresh._log.synced  # ranked from the store's index
        holding = EpisodicMemory(backend, clock=clock, max_episodes=100_000)
        await holding.load()
        in_process = await holding.explain(query, 5, intent="what_failed")
    assert [(s.episode.id, s.score) for s in from_store] == [
        (s.episode.id, s.score) for s in in_process
    ]
    return [s.episode.id for s in from_store]


async def test_an_older_store_is_indexed_on_first_open_with_progress(tmp_path: Path) -> None:
    path = tmp_path / "older.db"
    _older_store(path, 300)
    seen: list[tuple[int, int]] = []
    backend = SQLiteMemoryProvider(path, progress=lambda d, t: seen.append((d, t)))
    await backend.retrieve_many(["x"])  # the first call opens the database
    await backend.aclose()
    assert seen == [(300, 300)]
    assert _index_counts(path) == (0, 300, 3)
    assert await _same_answers(path, "sync the ledger for shop 5")


def _open_and_die(path: str) -> None:
    import anyio

    def die(done: int, total: int) -> None:
        os.kill(os.getpid(), signal.SIGKILL)  # right after the first batch committed

    async def run() -> None:
        await SQLiteMemoryProvider(path, progress=die).retrieve_many(["x"])

    anyio.run(run)


async def test_a_kill_during_the_upgrade_leaves_the_rest_queued_and_the_next_open_finishes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "older.db"
    episodes = BATCH + BATCH // 2
    _older_store(path, episodes)
    child = multiprocessing.get_context("spawn").Process(target=_open_and_die, args=(str(path),))
    child.start()
    child.join(120)
    assert child.exitcode == -signal.SIGKILL
    pending, indexed, version = _index_counts(path)
    assert version == 3
    assert (indexed, pending) == (BATCH, episodes - BATCH)  # one batch in, the rest queued
    assert await _same_answers(path, "sync the ledger for shop 11")
    assert _index_counts(path) == (0, episodes, 3)


async def test_the_page_cache_is_bounded_by_a_setting(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cache_bytes"):
        SQLiteMemoryProvider(tmp_path / "x.db", cache_bytes=-1)
    backend = SQLiteMemoryProvider(tmp_path / "x.db", cache_bytes=1 << 20)

    async with backend:
        size = await backend._run("read", lambda c: c.execute("PRAGMA cache_size").fetchone()[0])
    assert size == -1024
