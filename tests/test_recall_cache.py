"""What recalls from the store's index keep between recalls (``_store_cache.py``): a memory that
stays up answers exactly as a memory that reads the log afresh, whatever changed in the store
meanwhile (a record, a grade, a forget, a use in another process; a write behind the library's
back), and what it keeps never exceeds the provider's ``recall_cache_bytes``.

Every store that keeps the index: SQLite, Redis, Redis Cluster, PostgreSQL.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import Clock
from stores import Store
from test_recall_from_the_store import QUERIES, parts, varied_log

from deepcrew_episodic import Episode, EpisodicMemory
from deepcrew_episodic._store_cache import cache_of
from deepcrew_episodic.providers import (
    MemoryProvider,
    RedisMemoryProvider,
    SQLiteMemoryProvider,
    open_provider,
)
from deepcrew_episodic.providers._sqlite_index import TAIL_SEQ

pytestmark = pytest.mark.anyio

NS = "kept"


@pytest.fixture(params=["sqlite", "redis", "cluster", "postgres"])
def kept_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    kind: str = request.param
    if kind == "sqlite":
        return Store(kind, str(tmp_path / "episodes.db"))
    if kind == "postgres":
        return Store(kind, request.getfixturevalue("postgres_target"))
    target = request.getfixturevalue("clean_redis" if kind == "redis" else "cluster_target")
    return Store(kind, target)


def opened(store: Store, **options: Any) -> MemoryProvider:
    if store.kind == "sqlite":
        return SQLiteMemoryProvider(store.target, **options)
    if store.kind == "postgres":
        return open_provider(store.target, **options)
    return RedisMemoryProvider(store.target, cluster=store.kind == "cluster", **options)


class Reads:
    """Counts the trips a provider makes to its index (a recall answered from what was kept
    makes none)."""

    def __init__(self, provider: MemoryProvider) -> None:
        self.count = 0
        original = provider.read_index

        async def counted(prefix: str, fn: Any) -> Any:
            self.count += 1
            return await original(prefix, fn)

        provider.read_index = counted  # type: ignore[method-assign]


async def answers(memory: EpisodicMemory) -> list[Any]:
    return [parts(await memory.explain(query, **kwargs)) for query, kwargs in QUERIES]


async def loaded_answers(backend: MemoryProvider, clock: Clock, **options: Any) -> list[Any]:
    loaded = EpisodicMemory(backend, namespace=NS, clock=clock, **options)
    await loaded.load()
    return await answers(loaded)


def elsewhere(store: Store, body: str) -> None:
    """Run *body* in another process, with ``memory`` open on the same store."""
    opener = {
        "sqlite": f"SQLiteMemoryProvider({store.target!r})",
        "postgres": f"open_provider({store.target!r})",
    }.get(store.kind, f"RedisMemoryProvider({store.target!r}, cluster={store.kind == 'cluster'})")
    script = textwrap.dedent(
        """
        import anyio
        from deepcrew_episodic import Episode, EpisodicMemory
        from deepcrew_episodic.providers import (
            RedisMemoryProvider, SQLiteMemoryProvider, open_provider)

        async def main():
            async with {opener} as provider:
                memory = EpisodicMemory(provider, namespace={ns!r})
        {body}

        anyio.run(main)
        """
    ).format(opener=opener, ns=NS, body=textwrap.indent(textwrap.dedent(body), " " * 8))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()


CHANGES = {
    "record": """
        await memory.record(Episode(query="refund the duplicate charge again", response="ok",
                                    outcome="success"))
    """,
    "grade": """
        for episode in (await memory.load())[-8:]:
            await memory.grade(episode.id, outcome="failure", note="found broken later")
    """,
    "forget": """
        episodes = await memory.load()
        await memory.forget([e.id for e in episodes if "refund" in e.query][-3:])
    """,
    "use": """
        await memory.used([e.id for e in (await memory.load())[-10:]])
    """,
}


@pytest.mark.parametrize("change", sorted(CHANGES))
async def test_a_change_in_another_process_is_seen_by_the_next_recall_of_a_memory_that_stays_up(
    kept_store: Store, clock: Clock, change: str
) -> None:
    async with opened(kept_store) as backend:
        await varied_log(backend, clock, NS, 4, n=60, ring=50)
        reads = Reads(backend)
        memory = EpisodicMemory(backend, namespace=NS, max_episodes=50, clock=clock)
        before = await answers(memory)
        assert before == await loaded_answers(backend, clock, max_episodes=50)
        cache = cache_of(backend)
        assert cache is not None
        assert 0 < cache.bytes <= cache.max_bytes
        trips = reads.count
        assert await answers(memory) == before
        assert reads.count == trips  # the second time, nothing was read from the index
        elsewhere(kept_store, CHANGES[change])
        after = await answers(memory)
        assert after == await loaded_answers(backend, clock, max_episodes=50)
        assert after != before
        assert not memory._log.synced
        assert memory.counters.recovered_indexes == 0


async def test_a_change_by_another_memory_of_this_process_is_seen_by_the_next_recall(
    kept_store: Store, clock: Clock
) -> None:
    async with opened(kept_store) as backend:
        await varied_log(backend, clock, NS, 5, n=40, ring=40)
        memory = EpisodicMemory(backend, namespace=NS, max_episodes=40, clock=clock)
        other = EpisodicMemory(backend, namespace=NS, max_episodes=40, clock=clock)
        await answers(memory)
        stored = await other.record(Episode(query="refund the duplicate charge", outcome="success"))
        assert (await memory.recall("refund the duplicate charge"))[0].id == stored.id
        await other.grade(stored.id, outcome="failure")
        assert (await memory.explain("refund the duplicate charge"))[0].episode.outcome == "failure"
        await other.forget(stored.id)
        assert stored.id not in {e.id for e in await memory.recall("refund duplicate charge")}
        assert await answers(memory) == await loaded_answers(backend, clock, max_episodes=40)
        # A raw delete through the provider (not through a memory) changes no counter.
        victim = (await memory.recall("refund the duplicate charge"))[0]
        loaded = EpisodicMemory(backend, namespace=NS, max_episodes=40, clock=clock)
        await loaded.load()
        (seq,) = [s for s, e in loaded._log.cached() if e.id == victim.id]
        await backend.delete([f"episodic:{NS}:e:{seq}"])
        assert victim.id not in {e.id for e in await memory.recall("refund the duplicate charge")}
        assert await answers(memory) == await loaded_answers(backend, clock, max_episodes=40)


@pytest.mark.parametrize("budget", [1, 2_000, 30_000, 300_000])
async def test_what_is_kept_never_exceeds_the_budget_and_changes_no_answer(
    kept_store: Store, clock: Clock, budget: int
) -> None:
    async with opened(kept_store, recall_cache_bytes=budget) as backend:
        await varied_log(backend, clock, NS, 6, n=80, ring=80)
        cache = cache_of(backend)
        assert cache is not None
        assert cache.max_bytes == budget
        memory = EpisodicMemory(backend, namespace=NS, max_episodes=80, clock=clock)
        expected = await loaded_answers(backend, clock, max_episodes=80)
        for _ in range(3):
            for (query, kwargs), wanted in zip(QUERIES, expected, strict=True):
                assert parts(await memory.explain(query, **kwargs)) == wanted, query
                assert cache.bytes <= budget
        assert not memory._log.synced
        assert memory.counters.recovered_indexes == 0


async def test_a_budget_of_zero_keeps_nothing(kept_store: Store, clock: Clock) -> None:
    async with opened(kept_store, recall_cache_bytes=0) as backend:
        await varied_log(backend, clock, NS, 7, n=30, ring=30)
        reads = Reads(backend)
        memory = EpisodicMemory(backend, namespace=NS, max_episodes=30, clock=clock)
        first = await answers(memory)
        trips = reads.count
        again = await answers(memory)
        assert reads.count == 2 * trips  # every recall read the index again
        assert again == first == await loaded_answers(backend, clock)
        assert cache_of(backend) is None


@pytest.mark.parametrize("bad", [-1, 1.5, "big", True])
def test_a_budget_that_is_not_a_count_of_bytes_is_refused(tmp_path: Path, bad: Any) -> None:
    from deepcrew_episodic import ConfigurationError

    with pytest.raises(ConfigurationError, match="recall_cache_bytes"):
        SQLiteMemoryProvider(tmp_path / "x.db", recall_cache_bytes=bad)
    with pytest.raises(ConfigurationError, match="recall_cache_bytes"):
        RedisMemoryProvider("redis://127.0.0.1:1/0", recall_cache_bytes=bad)


async def test_many_namespaces_share_one_budget(kept_store: Store, clock: Clock) -> None:
    budget = 60_000
    async with opened(kept_store, recall_cache_bytes=budget) as backend:
        cache = cache_of(backend)
        assert cache is not None
        memories = []
        for i in range(25):
            memory = EpisodicMemory(backend, namespace=f"tenant-{i}", clock=clock)
            for j in range(6):
                await memory.record(
                    Episode(query=f"refund order {i}-{j} for tenant {i}", outcome="success")
                )
            memories.append(memory)
        for _ in range(2):
            for i, memory in enumerate(memories):
                found = await memory.recall(f"refund order tenant {i}")
                assert {e.query.split()[-1] for e in found} == {str(i)}
                assert cache.bytes <= budget
        assert len(cache._spaces) < 25  # the least recently used namespaces went


# --- edits behind the library's back -----------------------------------------------------------


def raw_sql(path: str, statement: str, *args: Any) -> None:
    connection = sqlite3.connect(path)
    try:
        connection.execute(statement, args)
        connection.commit()
    finally:
        connection.close()


NEWEST = "(SELECT max(seq) FROM ix_episode WHERE ns = 'kept')"
SQL_EDITS = {
    "record replaced": (
        "INSERT OR REPLACE INTO kv (key, value) SELECT key, json_set(value, '$.query', "
        "'zebra crossing', '$.outcome', 'success') FROM kv "
        f"WHERE key = 'episodic:kept:e:' || {NEWEST}"
    ),
    "record deleted": f"DELETE FROM kv WHERE key = 'episodic:kept:e:' || {NEWEST}",
    "counter lowered": "UPDATE kv SET value = '20' WHERE key = 'episodic:kept:__seq__'",
    "counter raised": "UPDATE kv SET value = '900' WHERE key = 'episodic:kept:__seq__'",
    "index row deleted": f"DELETE FROM ix_episode WHERE ns = 'kept' AND seq = {NEWEST} - 1",
    "negative count": f"UPDATE ix_post SET n = -5 WHERE ns = 'kept' AND seq = {TAIL_SEQ}",
    "posting seq made a real": f"UPDATE ix_post SET seq = seq + 0.5 WHERE ns = 'kept' "
    f"AND seq = {NEWEST}",
    "posting seq made text": f"UPDATE ix_post SET seq = 'x' || seq WHERE ns = 'kept' "
    f"AND seq = {NEWEST} - 2",
    "index seq made text": f"UPDATE ix_episode SET seq = 'x' || seq WHERE ns = 'kept' "
    f"AND seq = {NEWEST} - 1",
    "index outcome edited": f"UPDATE ix_episode SET outcome = 'bogus' WHERE ns = 'kept' "
    f"AND seq = {NEWEST} - 2",
    "index row without a record": f"INSERT INTO ix_episode SELECT ns, 5000, 'ghost', "
    "timestamp, recorded, outcome, source, size, terms, tags, forget_at, run, conversation, "
    f"graded, corrupt FROM ix_episode WHERE ns = 'kept' AND seq = {NEWEST}",
    "posting time made text": "UPDATE ix_post SET recorded = 'soon' WHERE ns = 'kept' "
    f"AND seq = {NEWEST} - 3",
    "grade deleted": "DELETE FROM kv WHERE key = 'episodic:kept:g:1'",
    "use count edited": "UPDATE kv SET value = '40' WHERE key LIKE 'episodic:kept:u:%'",
}


@pytest.mark.parametrize("edit", sorted(SQL_EDITS))
async def test_sqlite_an_edit_behind_the_librarys_back_is_seen_by_the_next_recall(
    tmp_path: Path, clock: Clock, edit: str
) -> None:
    path = str(tmp_path / "episodes.db")
    async with SQLiteMemoryProvider(path) as backend:
        await seen_after(backend, clock, edit, lambda: raw_sql(path, SQL_EDITS[edit]))


async def seen_after(backend: MemoryProvider, clock: Clock, edit: str, apply: Any) -> None:
    """A memory that stays up answers as one that reads the log afresh after *apply* edits
    the store behind the library's back (the edit named *edit*)."""
    await varied_log(backend, clock, NS, 8, n=50, ring=50)
    memory = EpisodicMemory(backend, namespace=NS, max_episodes=50, clock=clock)
    await answers(memory)
    newest = (await memory.page(1)).episodes[0]
    assert await memory.recall(newest.query, top_k=50)
    apply()
    assert await answers(memory) == await loaded_answers(backend, clock, max_episodes=50)
    found = {e.id for e in await memory.recall(newest.query, top_k=50)}
    if edit == "record replaced":
        assert (await memory.recall("zebra crossing"))[0].id == newest.id
    if edit == "record deleted":
        assert newest.id not in found


def raw_postgres(target: str, statement: str) -> None:
    import psycopg

    from deepcrew_episodic.providers._postgres import split_schema

    dsn, schema = split_schema(target)
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f'SET search_path TO "{schema}"')
        connection.execute(statement)


def _pg_key(text: str) -> str:
    return f"convert_to('{text}', 'UTF8')"


PG_NEWEST = "(SELECT max(seq) FROM ix_episode WHERE ns = convert_to('kept', 'UTF8'))"
PG_NEWEST_KEY = f"{_pg_key('episodic:kept:e:')} || convert_to({PG_NEWEST}::text, 'UTF8')"
PG_EDITS = {
    # (an episode cannot be UPDATEd in this schema: replaced as another program would)
    "record replaced": (
        f"WITH old AS (DELETE FROM kv WHERE key = {PG_NEWEST_KEY} RETURNING key, value) "
        "INSERT INTO kv SELECT key, convert_to(jsonb_set(jsonb_set(convert_from(value, "
        "'UTF8')::jsonb, '{query}', '\"zebra crossing\"'), '{outcome}', '\"success\"')::text, "
        "'UTF8') FROM old"
    ),
    "record deleted": f"DELETE FROM kv WHERE key = {PG_NEWEST_KEY}",
    "counter lowered": f"UPDATE kv SET value = {_pg_key('20')} "
    f"WHERE key = {_pg_key('episodic:kept:__seq__')}",
    "counter raised": f"UPDATE kv SET value = {_pg_key('900')} "
    f"WHERE key = {_pg_key('episodic:kept:__seq__')}",
    "grade deleted": f"DELETE FROM kv WHERE key = {_pg_key('episodic:kept:g:1')}",
    "index row deleted": "DELETE FROM ix_episode WHERE ns = convert_to('kept', 'UTF8') "
    f"AND seq = {PG_NEWEST} - 1",
    "use count edited": f"UPDATE kv SET value = {_pg_key('40')} "
    "WHERE key LIKE 'episodic:kept:u:%'::bytea",
}


@pytest.mark.postgres
@pytest.mark.parametrize("edit", sorted(PG_EDITS))
async def test_postgres_an_edit_behind_the_librarys_back_is_seen_by_the_next_recall(
    postgres_target: str, clock: Clock, edit: str
) -> None:
    async with open_provider(postgres_target) as backend:
        await seen_after(
            backend, clock, edit, lambda: raw_postgres(postgres_target, PG_EDITS[edit])
        )


async def test_redis_an_edited_counter_is_seen_by_the_next_recall(
    kept_store: Store, clock: Clock
) -> None:
    if kept_store.kind not in ("redis", "cluster"):
        pytest.skip("raw redis commands")
    import redis

    async with opened(kept_store) as backend:
        await varied_log(backend, clock, NS, 9, n=40, ring=40)
        memory = EpisodicMemory(backend, namespace=NS, max_episodes=40, clock=clock)
        await answers(memory)
        tag = "{episodic:kept}" if kept_store.kind == "cluster" else "episodic:kept"
        raw: Any = (
            redis.RedisCluster.from_url(kept_store.target, decode_responses=True)
            if kept_store.kind == "cluster"
            else redis.Redis.from_url(kept_store.target, decode_responses=True)
        )
        try:
            for value in ("900", "41"):
                raw.set(f"deepcrew:{tag}:__seq__", value)
                assert await answers(memory) == await loaded_answers(
                    backend, clock, max_episodes=40
                )
        finally:
            raw.close()


# --- a namespace read whole ----------------------------------------------------------------------


def is_whole(backend: MemoryProvider) -> bool:
    """Whether what recalls keep of NS holds the whole namespace (see CachingReader.load)."""
    cache = cache_of(backend)
    assert cache is not None
    return any(("W",) in space.data for space in cache._spaces.values())  # (NS alone here)


async def test_a_small_namespace_read_whole_answers_first_time_questions_without_the_store(
    kept_store: Store, clock: Clock
) -> None:
    async with opened(kept_store) as backend:
        await varied_log(backend, clock, NS, 11, n=70, ring=60)
        reads = Reads(backend)
        memory = EpisodicMemory(backend, namespace=NS, max_episodes=60, clock=clock)
        (first, first_kw), (second, second_kw), *rest = QUERIES
        await memory.explain(first, **first_kw)
        assert not is_whole(backend)  # one question: read as it needs, no more
        await memory.explain(second, **second_kw)
        assert is_whole(backend)
        trips = reads.count
        found = [parts(await memory.explain(query, **kwargs)) for query, kwargs in rest]
        assert reads.count == trips  # questions never asked before: none went to the store
        assert found == (await loaded_answers(backend, clock, max_episodes=60))[2:]
        assert memory.counters.recovered_indexes == 0


async def test_each_question_asked_twice_by_a_memory_that_stays_up_answers_as_a_fresh_one(
    kept_store: Store, clock: Clock
) -> None:
    async with opened(kept_store) as backend, opened(kept_store, recall_cache_bytes=0) as bare:
        await varied_log(backend, clock, NS, 12, n=90, ring=70)
        memory = EpisodicMemory(backend, namespace=NS, max_episodes=70, clock=clock)
        fresh = EpisodicMemory(bare, namespace=NS, max_episodes=70, clock=clock)
        for query, kwargs in QUERIES:
            expected = parts(await fresh.explain(query, **kwargs))
            assert parts(await memory.explain(query, **kwargs)) == expected, query
            assert parts(await memory.explain(query, **kwargs)) == expected, query
        assert await answers(memory) == await loaded_answers(backend, clock, max_episodes=70)
        assert not memory._log.synced
        assert not fresh._log.synced


@pytest.mark.parametrize("change", sorted(CHANGES))
async def test_a_change_in_another_process_after_a_namespace_was_read_whole_is_seen(
    kept_store: Store, clock: Clock, change: str
) -> None:
    store = kept_store
    async with opened(store) as backend:
        await varied_log(backend, clock, NS, 13, n=60, ring=50)
        memory = EpisodicMemory(backend, namespace=NS, max_episodes=50, clock=clock)
        before = await answers(memory)
        assert is_whole(backend)
        elsewhere(store, CHANGES[change])
        after = await answers(memory)
        assert after == await answers(memory)
        assert after == await loaded_answers(backend, clock, max_episodes=50)
        assert after != before
        assert memory.counters.recovered_indexes == 0


async def test_a_namespace_too_large_for_a_quarter_of_the_budget_is_not_read_whole(
    kept_store: Store, clock: Clock
) -> None:
    budget = 200_000
    async with opened(kept_store, recall_cache_bytes=budget) as backend:
        await varied_log(backend, clock, NS, 14, n=80, ring=80)
        memory = EpisodicMemory(backend, namespace=NS, max_episodes=80, clock=clock)
        expected = await loaded_answers(backend, clock, max_episodes=80)
        for _ in range(2):
            assert await answers(memory) == expected
            assert not is_whole(backend)
            cache = cache_of(backend)
            assert cache is not None
            assert cache.bytes <= budget
