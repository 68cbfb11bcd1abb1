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

from deepcrew_episodic import ConfigurationError, Episode, EpisodicMemory
from deepcrew_episodic.providers import SQLiteMemoryProvider
from deepcrew_episodic.providers._sqlite import _SCHEMA_VERSION
from deepcrew_episodic.providers._sqlite_index import (
    BATCH,
    HEAD_SEQ,
    MERGE_AT,
    TABLES,
    TAIL_SEQ,
)

pytestmark = pytest.mark.anyio

NOW = 1_800_000_000.0
SCHEMA = _SCHEMA_VERSION


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


async def _merged(path: Path) -> None:
    """Every posting that waits merged into ix_post (what a purge does first)."""
    async with SQLiteMemoryProvider(path) as backend:
        await backend.purge()


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
    assert _index_counts(path) == (0, 300, SCHEMA)
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
    assert version == SCHEMA
    assert (indexed, pending) == (BATCH, episodes - BATCH)  # one batch in, the rest queued
    assert await _same_answers(path, "sync the ledger for shop 11")
    assert _index_counts(path) == (0, episodes, SCHEMA)


async def test_the_page_cache_is_bounded_by_a_setting(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cache_bytes"):
        SQLiteMemoryProvider(tmp_path / "x.db", cache_bytes=-1)
    backend = SQLiteMemoryProvider(tmp_path / "x.db", cache_bytes=1 << 20)

    async with backend:
        size = await backend._run("read", lambda c: c.execute("PRAGMA cache_size").fetchone()[0])
    assert size == -1024


# Schema 5 wrote an episode's postings to ix_posting as it indexed the episode, and its delete
# trigger dropped them (its own words, as that version made it).
_SCHEMA_5_TRIGGER = (
    "CREATE TRIGGER ix_record_deleted AFTER DELETE ON kv WHEN old.key GLOB "
    "'episodic:*:[eg]:[0-9]*' BEGIN DELETE FROM ix_posting WHERE (ns, term, size, recorded, "
    "seq) IN (SELECT e.ns, j.value, e.size, e.recorded, e.seq FROM ix_episode AS e, "
    "json_each(CASE WHEN json_valid(e.terms) THEN e.terms ELSE '[]' END) AS j WHERE e.ns = "
    "substr(old.key, 10, instr(substr(old.key, 10), ':') - 1) AND e.seq = "
    "CAST(substr(old.key, instr(substr(old.key, 10), ':') + 12) AS INTEGER) AND 'episodic:' "
    "|| e.ns || ':e:' || e.seq = old.key); INSERT INTO ix_posting (ns, term, size, recorded, "
    "seq, n) SELECT e.ns, j.value, e.size, -9e999, 0, 1 FROM ix_episode AS e, json_each(CASE "
    "WHEN json_valid(e.terms) THEN e.terms ELSE '[]' END) AS j WHERE changes() = "
    "json_array_length(CASE WHEN json_valid(e.terms) THEN e.terms ELSE '[]' END) AND e.ns = "
    "substr(old.key, 10, instr(substr(old.key, 10), ':') - 1) AND e.seq = "
    "CAST(substr(old.key, instr(substr(old.key, 10), ':') + 12) AS INTEGER) AND 'episodic:' "
    "|| e.ns || ':e:' || e.seq = old.key ON CONFLICT (ns, term, size, recorded, seq) DO "
    "UPDATE SET n = coalesce(n, 0) + 1; UPDATE ix_posting SET n = CASE WHEN seq = 0 THEN 0 "
    "ELSE (SELECT count(*) FROM ix_posting AS t WHERE t.ns = ix_posting.ns AND t.term = "
    "ix_posting.term AND t.size = ix_posting.size AND t.seq > 0 AND t.recorded < 9e999) END "
    "WHERE (ns, term, size, recorded, seq) IN (SELECT e.ns, j.value, e.size, k.recorded, "
    "k.seq FROM ix_episode AS e, json_each(CASE WHEN json_valid(e.terms) THEN e.terms ELSE "
    "'[]' END) AS j, (SELECT -9e999 AS recorded, 0 AS seq UNION ALL SELECT 9e999, "
    "9223372036854775807) AS k WHERE e.ns = substr(old.key, 10, instr(substr(old.key, 10), "
    "':') - 1) AND e.seq = CAST(substr(old.key, instr(substr(old.key, 10), ':') + 12) AS "
    "INTEGER) AND 'episodic:' || e.ns || ':e:' || e.seq = old.key AND changes() = 0); DELETE "
    "FROM ix_posting WHERE (ns, term, size, recorded, seq) IN (SELECT t.ns, t.term, t.size, "
    "k.recorded, k.seq FROM ix_episode AS e CROSS JOIN json_each(CASE WHEN "
    "json_valid(e.terms) THEN e.terms ELSE '[]' END) AS j CROSS JOIN ix_posting AS t LEFT "
    "JOIN ix_posting AS h ON h.ns = t.ns AND h.term = t.term AND h.size = t.size AND "
    "h.recorded = -9e999 AND h.seq = 0 CROSS JOIN (SELECT -9e999 AS recorded, 0 AS seq UNION "
    "ALL SELECT 9e999, 9223372036854775807) AS k WHERE e.ns = substr(old.key, 10, "
    "instr(substr(old.key, 10), ':') - 1) AND e.seq = CAST(substr(old.key, "
    "instr(substr(old.key, 10), ':') + 12) AS INTEGER) AND 'episodic:' || e.ns || ':e:' || "
    "e.seq = old.key AND t.ns = e.ns AND t.term = j.value AND t.size = e.size AND t.recorded "
    "= 9e999 AND t.seq = 9223372036854775807 AND t.n - coalesce(h.n, 0) <= 0); DELETE FROM "
    "ix_episode WHERE ns = substr(old.key, 10, instr(substr(old.key, 10), ':') - 1) AND seq = "
    "CAST(substr(old.key, instr(substr(old.key, 10), ':') + 12) AS INTEGER) AND 'episodic:' "
    "|| ns || ':e:' || seq = old.key; DELETE FROM ix_grade WHERE key = old.key; DELETE FROM "
    "ix_pending WHERE key = old.key; END"
)


def _as_schema_5(conn: sqlite3.Connection) -> None:
    """Turn a store of the current schema, with no postings waiting (see _merged), into one of
    schema 5, as that version wrote it: the postings table named ix_posting."""
    assert conn.execute("SELECT count(*) FROM ix_lag").fetchone() == (0,)
    conn.execute("DROP TABLE ix_lag")
    conn.execute("DROP TRIGGER ix_record_deleted")
    conn.execute("ALTER TABLE ix_post RENAME TO ix_posting")
    conn.execute(_SCHEMA_5_TRIGGER)
    conn.execute("PRAGMA user_version = 5")


# Schema 4 kept the posting counts in a table of their own, ix_count, lowered and raised in
# the statements that add and drop an episode's postings; its tables are otherwise those of
# the current schema.
_SCHEMA_4_TERMS = "json_each(CASE WHEN json_valid(e.terms) THEN e.terms ELSE '[]' END) AS j"
_SCHEMA_4_TERMS_OF = (
    "SELECT e.ns, j.value, e.size FROM ix_episode AS e, "
    + _SCHEMA_4_TERMS
    + " WHERE e.key = old.key"
)
_SCHEMA_4_TRIGGER = (
    "CREATE TRIGGER ix_record_deleted AFTER DELETE ON kv "
    "WHEN old.key GLOB 'episodic:*:[eg]:[0-9]*' BEGIN "
    "DELETE FROM ix_posting WHERE (ns, term, size, recorded, seq) IN (SELECT e.ns, j.value, "
    "e.size, e.recorded, e.seq FROM ix_episode AS e, "
    + _SCHEMA_4_TERMS
    + " WHERE e.key = old.key); "
    "UPDATE ix_count SET n = n - 1 WHERE changes() = (SELECT json_array_length(CASE WHEN "
    "json_valid(e.terms) THEN e.terms ELSE '[]' END) FROM ix_episode AS e WHERE e.key = old.key) "
    "AND (ns, term, size) IN (" + _SCHEMA_4_TERMS_OF + "); "
    "UPDATE ix_count SET n = (SELECT count(*) FROM ix_posting AS t WHERE t.ns = ix_count.ns "
    "AND t.term = ix_count.term AND t.size = ix_count.size) "
    "WHERE (ns, term, size) IN (" + _SCHEMA_4_TERMS_OF + " AND changes() = 0); "
    "DELETE FROM ix_count WHERE n <= 0 AND (ns, term, size) IN (" + _SCHEMA_4_TERMS_OF + "); "
    "DELETE FROM ix_episode WHERE key = old.key; "
    "DELETE FROM ix_grade WHERE key = old.key; "
    "DELETE FROM ix_pending WHERE key = old.key; END"
)


def _as_schema_4(conn: sqlite3.Connection) -> None:
    """Turn a store of the current schema into one of schema 4, as that version wrote it."""
    _as_schema_5(conn)
    conn.execute(
        "CREATE TABLE ix_count (ns TEXT NOT NULL, term TEXT NOT NULL, size INTEGER NOT NULL, "
        "n INTEGER NOT NULL, PRIMARY KEY (ns, term, size)) WITHOUT ROWID"
    )
    conn.execute(
        "INSERT INTO ix_count SELECT ns, term, size, count(*) FROM ix_posting "
        f"WHERE seq > {HEAD_SEQ} AND seq < {TAIL_SEQ} GROUP BY ns, term, size"
    )
    conn.execute(f"DELETE FROM ix_posting WHERE seq IN ({HEAD_SEQ}, {TAIL_SEQ})")
    for trigger in ("ix_record_deleted", "ix_grade_added", "ix_grade_deleted"):
        conn.execute(f"DROP TRIGGER {trigger}")
    conn.execute("ALTER TABLE ix_posting DROP COLUMN n")
    # Its episode rows kept their record's key, unique.
    conn.execute(
        "CREATE TABLE ix_episode_4 (key TEXT NOT NULL UNIQUE, ns TEXT NOT NULL, "
        "seq INTEGER NOT NULL, episode_id TEXT NOT NULL, timestamp TEXT NOT NULL, "
        "recorded REAL NOT NULL, outcome TEXT NOT NULL, source TEXT NOT NULL, "
        "size INTEGER NOT NULL, terms TEXT NOT NULL, tags TEXT NOT NULL, forget_at REAL, "
        "run TEXT NOT NULL, conversation TEXT NOT NULL, graded INTEGER NOT NULL DEFAULT 0, "
        "corrupt INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (ns, seq)) WITHOUT ROWID"
    )
    conn.execute(
        "INSERT INTO ix_episode_4 SELECT 'episodic:' || ns || ':e:' || seq, * FROM ix_episode"
    )
    conn.execute("DROP TABLE ix_episode")
    conn.execute("ALTER TABLE ix_episode_4 RENAME TO ix_episode")
    for statement in TABLES:  # its indexes and the grade triggers are those of schema 4
        if " ON ix_episode " in statement or " ON ix_grade BEGIN" in statement:
            conn.execute(statement)
    conn.execute(_SCHEMA_4_TRIGGER)
    conn.execute("PRAGMA user_version = 4")


# Schema 3 kept the posting counts with a trigger per posting, and its postings in ix_term; its
# tables are otherwise those of schema 4.
_SCHEMA_3_TRIGGERS = (
    "CREATE TRIGGER ix_record_deleted AFTER DELETE ON kv "
    "WHEN old.key GLOB 'episodic:*:[eg]:[0-9]*' BEGIN "
    "DELETE FROM ix_term WHERE (ns, term, size, recorded, seq) IN (SELECT e.ns, j.value, "
    "e.size, e.recorded, e.seq FROM ix_episode AS e, "
    "json_each(CASE WHEN json_valid(e.terms) THEN e.terms ELSE '[]' END) AS j "
    "WHERE e.key = old.key); "
    "DELETE FROM ix_episode WHERE key = old.key; "
    "DELETE FROM ix_grade WHERE key = old.key; "
    "DELETE FROM ix_pending WHERE key = old.key; END",
    "CREATE TRIGGER ix_posting_added AFTER INSERT ON ix_term BEGIN "
    "INSERT INTO ix_count (ns, term, size, n) VALUES (new.ns, new.term, new.size, 1) "
    "ON CONFLICT (ns, term, size) DO UPDATE SET n = n + 1; END",
    "CREATE TRIGGER ix_posting_deleted AFTER DELETE ON ix_term BEGIN "
    "UPDATE ix_count SET n = n - 1 WHERE ns = old.ns AND term = old.term AND size = old.size; "
    "DELETE FROM ix_count WHERE ns = old.ns AND term = old.term AND size = old.size "
    "AND n <= 0; END",
)


def _counted(conn: sqlite3.Connection, postings: str) -> set[tuple[str, str, int, int]]:
    """The posting counts a store keeps: ix_count up to schema 4, counter rows since."""
    if postings == "ix_term" or conn.execute("PRAGMA user_version").fetchone()[0] < 5:
        return set(conn.execute("SELECT ns, term, size, n FROM ix_count"))
    tails = {
        (ns, term, size): n
        for ns, term, size, n in conn.execute(
            f"SELECT ns, term, size, n FROM {postings} WHERE seq = {TAIL_SEQ}"
        )
    }
    heads = {
        (ns, term, size): n
        for ns, term, size, n in conn.execute(
            f"SELECT ns, term, size, n FROM {postings} WHERE seq = {HEAD_SEQ}"
        )
    }
    assert set(heads) <= set(tails)  # a head is never left without its tail
    return {(*k, n - heads.get(k, 0)) for k, n in tails.items()}


def _counts_are_exact(path: Path, postings: str = "ix_post") -> bool:
    """Whether every posting count is the number of postings it counts, and no other is kept."""
    conn = sqlite3.connect(path)
    try:
        counted = _counted(conn, postings)
        actual = set(
            conn.execute(
                f"SELECT ns, term, size, count(*) FROM {postings} "
                f"WHERE seq > {HEAD_SEQ} AND seq < {TAIL_SEQ} GROUP BY ns, term, size"
            )
        )
        return bool(actual) and counted == actual
    finally:
        conn.close()


def _schema(path: Path, kind: str) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {
            r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = ?", (kind,))
        }
    finally:
        conn.close()


async def _record(path: Path, first: int, last: int) -> None:
    async with SQLiteMemoryProvider(path) as backend:
        memory = EpisodicMemory(backend, clock=clock, max_episodes=100_000)
        for seq in range(first, last + 1):
            await memory.record(
                Episode(
                    query=f"sync the ledger for shop {seq % 7} (batch {seq})",
                    response="done",
                    outcome="failure" if seq % 5 == 0 else "success",
                    tags=[f"shop{seq % 3}"],
                )
            )


async def test_a_schema_3_store_is_upgraded_in_place_and_its_counts_stay_exact(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v3.db"
    await _record(path, 1, 30)
    await _merged(path)
    conn = sqlite3.connect(path)
    _as_schema_4(conn)
    conn.execute("DROP TRIGGER ix_record_deleted")
    conn.execute("ALTER TABLE ix_posting RENAME TO ix_term")
    for statement in _SCHEMA_3_TRIGGERS:
        conn.execute(statement)
    conn.execute("PRAGMA user_version = 3")
    conn.execute("DELETE FROM kv WHERE key = 'episodic:default:e:3'")  # schema 3's triggers
    conn.commit()
    conn.close()
    assert _counts_are_exact(path, "ix_term")
    assert _index_counts(path) == (0, 29, 3)

    await _record(path, 31, 40)  # the first open upgrades; nothing is indexed again
    assert _index_counts(path) == (0, 39, SCHEMA)
    assert not {"ix_posting_added", "ix_posting_deleted"} & _schema(path, "trigger")
    # Renamed: a process of the older version that still has the store open fails on its next
    # write of postings (no such table) rather than writing them without their counts.
    assert "ix_term" not in _schema(path, "table")
    assert _counts_are_exact(path)
    async with SQLiteMemoryProvider(path) as backend:
        memory = EpisodicMemory(backend, clock=clock, max_episodes=100_000)
        assert await memory.forget(containing="shop 2") == 6
    assert _counts_are_exact(path)
    assert await _same_answers(path, "sync the ledger for shop 4")


async def test_a_schema_4_store_is_upgraded_in_place_with_its_counts_taken_from_the_postings(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v4.db"
    await _record(path, 1, 30)
    await _merged(path)
    conn = sqlite3.connect(path)
    _as_schema_4(conn)
    conn.execute("DELETE FROM kv WHERE key = 'episodic:default:e:3'")  # schema 4's trigger
    # A count edited by hand: the upgrade counts the postings, it does not take this over.
    conn.execute("UPDATE ix_count SET n = n + 7 WHERE term = 'ledger'")
    conn.commit()
    conn.close()
    assert _index_counts(path) == (0, 29, 4)

    await _record(path, 31, 40)  # the first open upgrades; nothing is indexed again
    assert _index_counts(path) == (0, 39, SCHEMA)
    # Dropped: a process of the older version that still has the store open fails on its next
    # write or search (no such table) rather than reading counter rows as postings.
    assert "ix_count" not in _schema(path, "table")
    assert not any(
        name.startswith("sqlite_autoindex_ix_episode") for name in _schema(path, "index")
    )
    assert _counts_are_exact(path)
    async with SQLiteMemoryProvider(path) as backend:
        memory = EpisodicMemory(backend, clock=clock, max_episodes=100_000)
        assert await memory.forget(containing="shop 2") == 6
    assert _counts_are_exact(path)
    assert await _same_answers(path, "sync the ledger for shop 4")


async def test_a_schema_5_store_is_upgraded_in_place_and_a_reader_of_its_postings_fails_loudly(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v5.db"
    await _record(path, 1, 30)
    await _merged(path)
    conn = sqlite3.connect(path)
    _as_schema_5(conn)
    conn.execute("DELETE FROM kv WHERE key = 'episodic:default:e:3'")  # schema 5's trigger
    conn.commit()
    conn.close()
    assert _counts_are_exact(path, "ix_posting")
    assert _index_counts(path) == (0, 29, 5)

    await _record(path, 31, 40)  # the first open upgrades; nothing is indexed again
    assert _index_counts(path) == (0, 39, SCHEMA)
    # Renamed: a process of schema 5 that still has the store open fails on its next write or
    # search (no such table) rather than reading postings without those that wait.
    assert "ix_posting" not in _schema(path, "table")
    assert {"ix_post", "ix_lag"} <= _schema(path, "table")
    assert _counts_are_exact(path)
    async with SQLiteMemoryProvider(path) as backend:
        memory = EpisodicMemory(backend, clock=clock, max_episodes=100_000)
        assert await memory.forget(containing="shop 2") == 6
    assert _counts_are_exact(path)
    assert await _same_answers(path, "sync the ledger for shop 4")


async def test_counter_rows_go_with_the_last_posting_they_count(tmp_path: Path) -> None:
    path = tmp_path / "gone.db"
    await _record(path, 1, 12)
    async with SQLiteMemoryProvider(path) as backend:
        memory = EpisodicMemory(backend, clock=clock, max_episodes=100_000)
        assert await memory.forget(containing="sync") == 12
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT count(*) FROM ix_post").fetchone() == (0,)
    finally:
        conn.close()


async def test_a_ring_keeps_the_posting_counts_exact(tmp_path: Path) -> None:
    path = tmp_path / "ring.db"
    async with SQLiteMemoryProvider(path) as backend:
        # A ring that holds a merge's worth, written past two merges: evictions of merged
        # episodes and of waiting ones.
        ring = MERGE_AT + 40
        memory = EpisodicMemory(backend, clock=clock, max_episodes=ring)
        for seq in range(1, 3 * MERGE_AT):
            await memory.record(
                Episode(query=f"rotate the keys of vault {seq % 9} ({seq})", response="ok")
            )
    _, indexed, _ = _index_counts(path)
    assert indexed == ring
    assert _counts_are_exact(path)  # what was merged, with evictions among it
    assert await _same_answers(path, "rotate the keys of vault 4")  # and what waits
    await _merged(path)
    assert _counts_are_exact(path)


@pytest.mark.parametrize("merged", [True, False], ids=["merged", "waiting"])
async def test_postings_left_behind_by_an_index_edit_are_not_counted_twice(
    tmp_path: Path, merged: bool
) -> None:
    path = tmp_path / "edited.db"
    await _record(path, 1, 12)
    if merged:
        await _merged(path)
    conn = sqlite3.connect(path)
    (value,) = conn.execute("SELECT value FROM kv WHERE key = 'episodic:default:e:7'").fetchone()
    # The facts of an episode deleted by hand (its postings stay), then its record written
    # again behind the library's back: it is indexed again onto postings already there.
    conn.execute("DELETE FROM ix_episode WHERE seq = 7")
    conn.execute(
        "INSERT OR REPLACE INTO kv (key, value) VALUES ('episodic:default:e:7', ?)", (value,)
    )
    conn.commit()
    conn.close()
    await _record(path, 13, 14)
    assert _index_counts(path) == (0, 14, SCHEMA)
    assert await _same_answers(path, "sync the ledger for shop 0")
    await _merged(path)
    assert _counts_are_exact(path)


async def test_an_episode_with_postings_lost_to_an_index_edit_leaves_exact_counts(
    tmp_path: Path,
) -> None:
    path = tmp_path / "edited.db"
    await _record(path, 1, 12)
    await _merged(path)
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM ix_post WHERE seq = 5 AND term = 'ledger'")  # the index edited
    conn.execute(  # and its count with it
        f"UPDATE ix_post SET n = n + 3 WHERE term = 'ledger' AND seq = {TAIL_SEQ} "
        "AND size = (SELECT size FROM ix_episode WHERE seq = 5)"
    )
    conn.commit()
    conn.close()
    async with SQLiteMemoryProvider(path) as backend:
        memory = EpisodicMemory(backend, clock=clock, max_episodes=100_000)
        assert await memory.forget(containing="batch 5)") == 1
    assert _index_counts(path) == (0, 11, SCHEMA)
    assert _counts_are_exact(path)
