"""What only the SQLite provider promises, beyond the conformance suite (which it passes whole):
foreign and damaged files are refused and left untouched, a busy database is waited for in a
worker thread without blocking the event loop, batches are single statements, and nothing
assumes asyncio."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

from deepcrew_episodic import (
    ConfigurationError,
    CorruptDataError,
    Episode,
    EpisodicMemory,
    StorageTimeoutError,
)
from deepcrew_episodic.providers import FileMemoryProvider, SQLiteMemoryProvider
from deepcrew_episodic.providers._sqlite import _KEYS_RANGE

pytestmark = pytest.mark.anyio


def ep(query: str) -> Episode:
    return Episode(query=query, response="done", outcome="success")


# --- files that are not ours ------------------------------------------------------------------


async def test_a_file_that_is_not_a_database_is_refused_and_left_untouched(
    tmp_path: Path,
) -> None:
    path = tmp_path / "episodes.json"
    async with FileMemoryProvider(path) as json_store:  # someone points us at their JSON log
        await EpisodicMemory(json_store, namespace="ops").record(ep("rotate keys"))
    before = path.read_bytes()
    async with SQLiteMemoryProvider(path) as provider:
        for attempt in (provider.keys(""), provider.store("k", "v"), provider.increment("n")):
            with pytest.raises(CorruptDataError, match=str(path)) as info:
                await attempt
            assert isinstance(info.value.__cause__, sqlite3.DatabaseError)
    assert path.read_bytes() == before
    assert json.loads(before)  # still the JSON log it was
    assert sorted(p.name for p in tmp_path.iterdir()) == ["episodes.json", "episodes.json.lock"]


async def test_a_damaged_database_raises_corrupt_data_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "episodes.db"
    async with SQLiteMemoryProvider(path) as provider:
        await provider.write({f"k{i:05}": "v" * 200 for i in range(2000)})
    raw = bytearray(path.read_bytes())
    assert len(raw) > 8 * 4096
    raw[4096:] = b"\x5a" * (len(raw) - 4096)  # every page after the header page is garbage
    path.write_bytes(bytes(raw))
    async with SQLiteMemoryProvider(path) as provider:
        with pytest.raises(CorruptDataError, match=str(path)):
            await provider.keys("k")
    assert path.read_bytes() == bytes(raw)


async def test_a_database_of_another_application_is_not_written_into(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
        conn.execute("INSERT INTO users VALUES ('ada')")
    conn.close()
    before = path.read_bytes()
    async with SQLiteMemoryProvider(path) as provider:
        with pytest.raises(ConfigurationError, match="another application"):
            await provider.store("k", "v")
    assert path.read_bytes() == before


async def test_a_database_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "episodes.db"
    async with SQLiteMemoryProvider(path) as provider:
        await provider.store("k", "v")
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    async with SQLiteMemoryProvider(path) as provider:
        with pytest.raises(ConfigurationError, match="newer"):
            await provider.retrieve("k")


async def test_values_that_are_not_text_are_refused_and_nothing_is_written(tmp_path: Path) -> None:
    async with SQLiteMemoryProvider(tmp_path / "e.db") as provider:
        with pytest.raises(ConfigurationError, match="strings only"):
            await provider.write({"a": "1", "b": 2})  # type: ignore[dict-item]
        with pytest.raises(ConfigurationError, match="valid Unicode"):
            await provider.write({"a": "1", "b": "half a pair \ud800"})
        assert await provider.keys("") == []


# --- atomicity --------------------------------------------------------------------------------


async def test_increment_and_write_is_one_transaction(tmp_path: Path) -> None:
    async with SQLiteMemoryProvider(tmp_path / "e.db") as provider:
        await provider.store("seq", "not a number")
        with pytest.raises(CorruptDataError, match="seq"):
            await provider.increment_and_write("seq", lambda n, v: ({f"e:{n}": "body"}, ()))
        assert await provider.keys("") == ["seq"]  # nothing of the failed step was written

        calls: list[int] = []

        def fail(n: int, values: Mapping[str, str | None]) -> tuple[dict[str, str], list[str]]:
            calls.append(n)
            raise RuntimeError("placing failed")

        await provider.store("seq", "7")
        with pytest.raises(RuntimeError):
            await provider.increment_and_write("seq", fail, read=["ring"])
        assert calls == [8]  # called once: the read happened inside the transaction
        assert await provider.retrieve("seq") == "7"  # the counter rolled back too
        await provider.store("ring", "3")
        placed = await provider.increment_and_write(
            "seq", lambda n, v: ({f"e:{n}": v["ring"] or ""}, ["e:1"]), read=["ring"]
        )
        assert placed == 8
        assert await provider.retrieve_many(["seq", "e:8"]) == ["8", "3"]


async def test_increments_from_two_connections_never_collide(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    seen: list[int] = []
    async with SQLiteMemoryProvider(path) as one, SQLiteMemoryProvider(path) as two:

        async def bump(provider: SQLiteMemoryProvider) -> None:
            for _ in range(100):
                seen.append(await provider.increment("n"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(bump, one)
            tg.start_soon(bump, two)
    assert sorted(seen) == list(range(1, 201))


# --- the event loop is never blocked ----------------------------------------------------------


async def test_a_busy_database_is_waited_for_off_the_event_loop(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    async with SQLiteMemoryProvider(path) as provider:
        await provider.store("k", "old")
        # Another process-like writer holds the write lock for a while.
        holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")
        ticks = 0
        done = anyio.Event()

        async def write() -> None:
            await provider.store("k", "new")
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            for _ in range(20):  # the loop keeps running while the write waits for the lock
                await anyio.sleep(0.01)
                ticks += 1
            assert not done.is_set()
            holder.execute("COMMIT")
            holder.close()
        assert ticks == 20
        assert await provider.retrieve("k") == "new"


async def test_a_lock_held_past_the_timeout_is_a_storage_timeout_error(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    async with SQLiteMemoryProvider(path, timeout=0.2) as provider:
        await provider.store("k", "old")
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StorageTimeoutError, match=r"e\.db.*locked"):
                await provider.store("k", "new")
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert await provider.retrieve("k") == "old"


# --- batches are single statements -------------------------------------------------------------


async def test_retrieve_many_beyond_sqlites_parameter_limit(tmp_path: Path) -> None:
    async with SQLiteMemoryProvider(tmp_path / "e.db") as provider:
        keys = [f"k{i}" for i in range(40_000)]  # more than SQLITE_MAX_VARIABLE_NUMBER
        await provider.write({k: k.upper() for k in keys[::2]})
        values = await provider.retrieve_many(keys)
        assert values == [k.upper() if i % 2 == 0 else None for i, k in enumerate(keys)]


async def test_keys_is_a_range_scan_with_exact_prefix_semantics(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    odd = ["a%b", "a_b", "a%", "ab", "é:1", "é:2", "éa", "\U0010ffff\U0010ffffx", "\U0010ffffy"]
    # keys whose UTF-8 ends in 0xBF/0xFF-ish bytes, around where a naive successor overflows
    odd += ["a\uffff", "a\uffff:1", "b\U0001ffff", "b\U00020000", "c\x7f", "c\x80", "c\udcff"]
    async with SQLiteMemoryProvider(path) as provider:
        await provider.write({k: "v" for k in odd})
        assert await provider.keys("a%") == ["a%", "a%b"]  # no LIKE wildcards
        assert await provider.keys("a_") == ["a_b"]
        assert await provider.keys("é:") == ["é:1", "é:2"]
        assert await provider.keys("\U0010ffff") == ["\U0010ffffy", "\U0010ffff\U0010ffffx"]
        assert await provider.keys("\U0010ffff\U0010ffff") == ["\U0010ffff\U0010ffffx"]
        assert await provider.keys("") == sorted(odd)
        for prefix in {k[:i] for k in odd for i in range(len(k) + 1)}:
            assert await provider.keys(prefix) == sorted(k for k in odd if k.startswith(prefix))
    conn = sqlite3.connect(path)
    plan = conn.execute(
        f"EXPLAIN QUERY PLAN {_KEYS_RANGE}", ("episodic:a:", b"episodic:a;")
    ).fetchall()
    conn.close()
    assert "SEARCH kv USING PRIMARY KEY (key>? AND key<?)" in plan[0][3]


# --- deleted text leaves every file -----------------------------------------------------------


def _files_holding(directory: Path, needle: bytes) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if needle in p.read_bytes())


@pytest.mark.parametrize("how", ["forget", "sweep", "clear", "delete", "shrink", "evict"])
async def test_deleted_text_is_in_no_file_of_the_store(tmp_path: Path, how: str) -> None:
    path = tmp_path / "e.db"
    secret = b"4111-1111-1111-1111"
    now = [1_800_000_000.0]
    async with SQLiteMemoryProvider(path) as provider:
        ring = 30 if how == "evict" else 500
        memory = EpisodicMemory(provider, namespace="pay", max_episodes=ring, clock=lambda: now[0])
        for i in range(300):  # enough pages for splits and an automatic checkpoint or two
            await memory.record(ep(f"refund order {i} " + "padding " * 20))
        deadline = datetime.fromtimestamp(now[0] + 60, UTC)
        doomed = await memory.record(
            Episode(
                # A word of its own: its terms leave the index too, not only its record.
                query=f"card {secret.decode()} refund zanzibarite",
                response="ok",
                forget_after=deadline.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            )
        )
        for i in range(40 if how == "evict" else 20):  # the secret's page is rewritten after
            await memory.record(ep(f"later order {i}"))
        assert _files_holding(tmp_path, secret)  # it is on disk (-wal at least)
        assert _files_holding(tmp_path, b"zanzibar")
        if how == "forget":
            assert await memory.forget(doomed.id) == 1
        elif how == "sweep":
            now[0] += 61  # past its forget_after
            assert await memory.sweep() >= 1
        elif how == "clear":
            await memory.clear()
        elif how == "shrink":
            assert await memory.shrink(20) >= 1
        elif how == "evict":
            await memory.sweep()  # the ring evicted it; a sweep leaves no copy in the journal
        else:
            keys = await provider.keys("episodic:pay:e:")
            values = await provider.retrieve_many(keys)
            await provider.delete(
                [k for k, v in zip(keys, values, strict=True) if secret.decode() in (v or "")]
            )
        # the connection is still open: nothing is left to a later close or checkpoint
        assert sorted(p.name for p in tmp_path.iterdir())[:1] == ["e.db"]
        assert _files_holding(tmp_path, secret) == []
        assert _files_holding(tmp_path, b"zanzibar") == []
        expected = {"clear": 0, "shrink": 20, "evict": 30}.get(how, 320)
        assert len(await memory.load()) == expected


# --- any async backend ------------------------------------------------------------------------


async def test_records_and_recalls_on_every_anyio_backend(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    async with SQLiteMemoryProvider(path) as provider:
        memory = EpisodicMemory(provider, namespace="any", max_episodes=50)

        async def one(i: int) -> None:
            await memory.record(ep(f"refund order case{i:03}"))

        async with anyio.create_task_group() as tg:
            for i in range(60):
                tg.start_soon(one, i)
        loaded = await memory.load()
        assert len(loaded) == 50
        assert len({e.id for e in loaded}) == 50
        target = loaded[10].query  # not the newest: recency alone cannot pick it
        assert [e.query for e in await memory.recall(target, top_k=1)] == [target]


async def test_reopens_after_aclose_and_across_threads(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    provider = SQLiteMemoryProvider(path)
    await provider.store("a", "1")
    await provider.aclose()
    await provider.aclose()  # idempotent
    assert await provider.retrieve("a") == "1"  # reopened lazily
    results: list[str | None] = []

    def in_another_thread() -> None:
        results.append(anyio.run(SQLiteMemoryProvider(path).retrieve, "a"))

    thread = threading.Thread(target=in_another_thread)
    thread.start()
    thread.join()
    assert results == ["1"]
    await provider.aclose()


# --- the example --------------------------------------------------------------------------------


def test_the_sqlite_example_keeps_every_episode_from_four_processes() -> None:
    from test_examples import run_example

    out = run_example("sqlite_store.py")
    assert "200 episodes from 4 processes (200 recorded)" in out
    block = out.split("## Relevant past experience", 1)[1]
    recalled = [line for line in block.splitlines() if line.startswith("- ")]
    assert len(recalled) == 2
    assert all("Refund a double charge" in line for line in recalled)


async def test_a_new_store_is_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        async with SQLiteMemoryProvider(tmp_path / "new.db") as provider:
            await EpisodicMemory(provider, namespace="n").record(ep("private"))
            modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    finally:
        os.umask(old)
    assert modes["new.db"] == 0o600
    assert all(mode == 0o600 for name, mode in modes.items() if name.startswith("new.db"))
