"""Recall from the index the store keeps: a memory that has not read the log ranks exactly as
one that read it in process (same episodes, scores and ``explain()`` parts).

Redis and Redis Cluster (the functions named ``test_redis_*``): the index is kept by the write
script, read by a synchronous client in a worker thread, caught up when records were written
without it.
"""

from __future__ import annotations

import gc
import logging
import random
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from conftest import Clock
from stores import Store

from deepcrew_episodic import Episode, EpisodicMemory
from deepcrew_episodic.providers import MemoryProvider

pytestmark = pytest.mark.anyio

WORDS = [
    "refund",
    "duplicate",
    "charge",
    "customer",
    "deploy",
    "staging",
    "rollback",
    "invoice",
    "timeout",
    "database",
    "migration",
    "login",
    "password",
    "reset",
    "webhook",
    "retry",
    "quota",
    "upgrade",
    "plan",
    "export",
    "report",
    "cache",
    "退款",
    "Rückerstattung",
]
OUTCOMES = ("success", "failure", "partial", "unknown", "abandoned")
SOURCES = ("", "verifier", "user", "agent", "judge")


@pytest.fixture(params=["redis", "cluster"])
def redis_store(request: pytest.FixtureRequest) -> Store:
    kind: str = request.param
    target = request.getfixturevalue("clean_redis" if kind == "redis" else "cluster_target")
    return Store(kind, target)


@pytest.fixture
async def backend(redis_store: Store) -> AsyncIterator[MemoryProvider]:
    async with redis_store.open() as opened:
        yield opened


def parts(ranking: Any) -> tuple[Any, ...]:
    """Everything explain() says of each episode, and of those under the floor."""

    def one(s: Any) -> tuple[Any, ...]:
        return (
            s.episode.to_dict(),
            s.score,
            s.relevance,
            s.recency,
            s.outcome_weight,
            s.matched,
            s.age_days,
            s.keyword,
            s.uses,
            s.iterations,
        )

    return tuple(map(one, ranking)), tuple(map(one, ranking.under_floor)), ranking.by


QUERIES: list[tuple[str, dict[str, Any]]] = [
    ("refund the duplicate charge", {}),
    ("deploy to staging failed with a timeout", {"intent": "what_failed"}),
    ("customer login password reset", {"intent": "what_worked"}),
    ("invoice export report", {"tags": ["billing"]}),
    ("database migration rollback", {"outcome": ["failure", "partial"]}),
    ("webhook retry quota", {"since": "10 days ago"}),
    ("cache upgrade plan", {"until": "3 days ago", "top_k": 8}),
    ("charge", {"top_k": 20, "min_relevance": 0.0}),
    ("refund customer deploy invoice login cache webhook", {"top_k": 5}),
    ("nothing shares these words", {}),
    ("退款 rückerstattung refund", {}),
]


async def same_answers(
    backend: MemoryProvider, clock: Clock, namespace: str, **options: Any
) -> EpisodicMemory:
    """Assert that a fresh memory ranks every query as one that read the log; return it."""
    fresh = EpisodicMemory(backend, namespace=namespace, clock=clock, **options)
    loaded = EpisodicMemory(backend, namespace=namespace, clock=clock, **options)
    await loaded.load()
    for query, kwargs in QUERIES:
        expected = parts(await loaded.explain(query, **kwargs))
        assert parts(await fresh.explain(query, **kwargs)) == expected, (query, kwargs)
    return fresh


def reads_from_the_store(memory: EpisodicMemory) -> bool:
    """The memory ranked without reading the log (nor falling back to it)."""
    return not memory._log.synced and memory.counters.recovered_indexes == 0


def episode(rng: random.Random, clock: Clock, i: int) -> Episode:
    words = rng.sample(WORDS, rng.randint(1, 7))
    roll = rng.random()
    if roll < 0.12:
        timestamp = ""  # undated: takes the time of the episode below it
    else:
        when = clock.now - rng.uniform(0, 40) * 86400
        timestamp = _iso(when)
    run = rng.random() < 0.3
    return Episode(
        query=" ".join(words) + f" case {i}",
        response="done",
        outcome=rng.choice(OUTCOMES),
        outcome_source=rng.choice(SOURCES),
        tags=rng.sample(["billing", "Ops", "auth", "Ünïcode"], rng.randint(0, 2)),
        reflection=" ".join(rng.sample(WORDS, 2)) if rng.random() < 0.5 else None,
        timestamp=timestamp,
        forget_after=_iso(clock.now + rng.choice([-1, 1]) * 86400) if rng.random() < 0.1 else None,
        run_id=f"run-{rng.randint(1, 6)}" if run else "",
        phase=rng.choice(["", "", "plan", "fix"]) if run else "",
        conversation_id=f"chat-{rng.randint(1, 3)}" if rng.random() < 0.2 else "",
    )


def _iso(when: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(when, dt.UTC).isoformat()


async def varied_log(
    backend: MemoryProvider, clock: Clock, namespace: str, seed: int, n: int, ring: int
) -> list[Episode]:
    """*n* episodes on a ring of *ring* (evictions), graded later by other memories, used,
    some forgotten."""
    rng = random.Random(seed)
    writer = EpisodicMemory(backend, namespace=namespace, max_episodes=ring, clock=clock)
    grader = EpisodicMemory(backend, namespace=namespace, max_episodes=ring, clock=clock)
    stored = [await writer.record(episode(rng, clock, i)) for i in range(n)]
    kept = [e for e in stored[-ring:] if e.forget_after is None]
    for target in rng.sample(kept, min(len(kept), 6)):
        await grader.grade(
            target.id,
            outcome=rng.choice(["success", "failure", "partial"]),
            note="graded later",
            source=rng.choice(["user", "verifier", "judge"]),
        )
    await grader.used([e.id for e in rng.sample(kept, min(len(kept), 5))])
    await writer.used(kept[-1].id)
    doomed = rng.sample(kept, min(len(kept), 3))
    await writer.forget([e.id for e in doomed])
    return stored


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_redis_a_fresh_memory_ranks_as_the_log_read_in_process(
    backend: MemoryProvider, clock: Clock, seed: int
) -> None:
    await varied_log(backend, clock, "support", seed, n=70, ring=50)
    fresh = await same_answers(backend, clock, "support", max_episodes=50)
    assert reads_from_the_store(fresh)
    # Expiry by age.
    aged = await same_answers(
        backend, clock, "support", max_episodes=50, max_age=timedelta(days=20)
    )
    assert reads_from_the_store(aged)
    clock.now += 5 * 86400  # time passes: recency and forget_after move with the clock
    later = await same_answers(backend, clock, "support", max_episodes=50)
    assert reads_from_the_store(later)


async def test_redis_a_smaller_view_of_a_larger_ring_ranks_as_the_log(
    backend: MemoryProvider, clock: Clock
) -> None:
    await varied_log(backend, clock, "view", 1, n=70, ring=50)
    smaller = await same_answers(backend, clock, "view", max_episodes=17)
    assert reads_from_the_store(smaller)


async def test_redis_grades_and_uses_from_another_memory_reach_the_next_fresh_recall(
    backend: MemoryProvider, clock: Clock
) -> None:
    stored = await varied_log(backend, clock, "late", 9, n=30, ring=100)
    first = await same_answers(backend, clock, "late", max_episodes=100)
    other = EpisodicMemory(backend, namespace="late", max_episodes=100, clock=clock)
    shown = [e for e in await other.load() if e.forget_after is None]
    assert len(shown) >= 20
    assert len(stored) == 30
    for e in shown[:10]:
        await other.grade(e.id, outcome="failure", note="it broke again", source="verifier")
    await other.used([e.id for e in shown[10:20]])
    again = await same_answers(backend, clock, "late", max_episodes=100)
    assert reads_from_the_store(first)
    assert reads_from_the_store(again)
    hit = await again.explain("refund duplicate charge deploy", top_k=30)
    assert any(s.uses for s in hit)


async def test_redis_a_run_of_several_iterations_and_phases_ranks_as_one_item(
    backend: MemoryProvider, clock: Clock
) -> None:
    memory = EpisodicMemory(backend, namespace="runs", clock=clock)
    for i in range(4):
        for phase in ("plan", "fix"):
            await memory.record(
                Episode(
                    query=f"deploy staging rollback attempt {i}",
                    outcome="failure" if i < 3 else "success",
                    run_id="run-a",
                    phase=phase,
                    timestamp=_iso(clock.now - (10 - i) * 3600),
                )
            )
    await memory.record(Episode(query="deploy staging", outcome="success", run_id="run-b"))
    fresh = await same_answers(backend, clock, "runs")
    assert reads_from_the_store(fresh)
    ranking = await fresh.explain("deploy staging rollback", top_k=10)
    assert max(s.iterations for s in ranking) > 1


async def test_redis_an_index_kept_before_its_run_set_existed_still_ranks_a_run_as_one_item(
    backend: MemoryProvider, redis_store: Store, clock: Clock
) -> None:
    memory = EpisodicMemory(backend, namespace="oldruns", clock=clock)
    for i in range(3):
        await memory.record(
            Episode(query=f"deploy staging attempt {i}", outcome="failure", run_id="run-a")
        )
    await memory.record(Episode(query="deploy staging", outcome="success"))
    client = await raw_client(redis_store)
    runs = [k for k in index_keys(client) if k.endswith("}:R")]
    marks = [k for k in index_keys(client) if k.endswith("}:w")]
    assert len(runs) == 1
    assert len(marks) == 1
    members = client.zrange(runs[0], 0, -1)
    assert len(members) == 3  # the run's iterations, not the episode outside it
    client.delete(runs[0])  # an index written by a version that kept no run set
    client.hdel(marks[0], "runs")
    fresh = await same_answers(backend, clock, "oldruns")
    assert reads_from_the_store(fresh)
    ranking = await fresh.explain("deploy staging attempt", top_k=10)
    assert [s.iterations for s in ranking if s.episode.run_id] == [3]
    assert client.zrange(runs[0], 0, -1) == members  # rebuilt from the run's own set
    assert client.hget(marks[0], "runs") == "1"
    await memory.forget([e.id for e in await memory.load() if e.run_id])
    assert client.zcard(runs[0]) == 0  # forgotten iterations leave it
    client.close()


def scans(client: Any) -> int:
    """How many SCAN commands the server (every node of a cluster) has run."""
    stats = client.info(
        "commandstats", **({"target_nodes": "all"} if hasattr(client, "get_nodes") else {})
    )
    per_node = stats.values() if hasattr(client, "get_nodes") else [stats]
    return sum(int(node.get("cmdstat_scan", {}).get("calls", 0)) for node in per_node)


async def test_redis_a_namespace_is_read_without_walking_the_other_keys_of_the_database(
    backend: MemoryProvider, redis_store: Store, clock: Clock
) -> None:
    # Many namespaces (or another application) on one database: a recall in one namespace,
    # its first included, reads that namespace's keys, never a SCAN over all of them.
    client = await raw_client(redis_store)
    for i in range(20):
        memory = EpisodicMemory(backend, namespace=f"tenant-{i}", clock=clock)
        await memory.record(Episode(query=f"deploy staging {i}", run_id=f"run-{i}"))
    client.mset({f"{{other}}:key:{i}": "x" for i in range(5000)})
    before = scans(client)
    for i in range(20):
        fresh = EpisodicMemory(backend, namespace=f"tenant-{i}", clock=clock)
        found = await fresh.explain("deploy staging")
        assert [s.episode.query for s in found] == [f"deploy staging {i}"]
        assert reads_from_the_store(fresh)
    assert scans(client) == before
    client.close()


async def test_redis_an_episode_dated_in_the_future_is_ranked_from_the_log(
    backend: MemoryProvider, clock: Clock
) -> None:
    memory = EpisodicMemory(backend, namespace="future", clock=clock)
    await memory.record(Episode(query="refund charge", timestamp=_iso(clock.now - 3600)))
    await memory.record(Episode(query="refund charge again", timestamp=_iso(clock.now - 60)))
    # A writer whose clock runs ahead: its record is dated days from now.
    raw = (await backend.retrieve_many(["episodic:future:e:2"]))[0]
    assert raw is not None
    ahead = raw.replace(_iso(clock.now - 60), _iso(clock.now + 9e5))
    assert ahead != raw
    await backend.write({"episodic:future:e:2": ahead})
    await memory.record(Episode(query="refund duplicate charge", timestamp=""))
    await same_answers(backend, clock, "future")


async def raw_client(store: Store) -> Any:
    import redis
    from redis.cluster import RedisCluster

    if store.kind == "cluster":
        return RedisCluster.from_url(store.target, decode_responses=True)
    return redis.Redis.from_url(store.target, decode_responses=True)


def index_keys(client: Any) -> list[str]:
    if hasattr(client, "get_nodes"):
        return sorted(
            k for k in client.scan_iter(match="deepcrew:ix:*", count=1000, target_nodes="all")
        )
    return sorted(client.scan_iter(match="deepcrew:ix:*", count=1000))


async def test_redis_a_store_written_without_the_index_is_indexed_by_its_first_reader(
    backend: MemoryProvider,
    redis_store: Store,
    clock: Clock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await varied_log(backend, clock, "old", 4, n=300, ring=280)  # two catch-up batches
    client = await raw_client(redis_store)
    built = index_keys(client)
    assert built
    for key in built:  # a store written before the index existed
        client.delete(key)
    with caplog.at_level(logging.INFO, logger="deepcrew_episodic"):
        fresh = await same_answers(backend, clock, "old", max_episodes=280)
    assert reads_from_the_store(fresh)
    assert any("indexing up to" in r.getMessage() for r in caplog.records)
    assert index_keys(client) == built  # the same index as the writes kept
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="deepcrew_episodic"):
        await same_answers(backend, clock, "old", max_episodes=280)
    assert not any("indexing up to" in r.getMessage() for r in caplog.records)
    client.close()


async def test_redis_a_record_written_by_an_older_writer_is_indexed_before_the_search(
    backend: MemoryProvider, redis_store: Store, clock: Clock
) -> None:
    memory = EpisodicMemory(backend, namespace="mixed", clock=clock)
    await memory.record(Episode(query="rotate the api keys", outcome="success"))
    first = await memory.record(Episode(query="rotate the api keys again", outcome="failure"))
    # An older version writes the next record and raises the counter, keeping no index.
    client = await raw_client(redis_store)
    raw = (await backend.retrieve_many(["episodic:mixed:e:2"]))[0]
    assert raw is not None
    tag = "{episodic:mixed}" if redis_store.kind == "cluster" else "episodic:mixed"
    client.set(f"deepcrew:{tag}:e:3", raw.replace(first.id, "f" * 32).replace("again", "twice"))
    client.set(f"deepcrew:{tag}:__seq__", "3")
    client.close()
    fresh = await same_answers(backend, clock, "mixed")
    assert reads_from_the_store(fresh)
    found = await fresh.recall("rotate api keys twice")
    assert found[0].id == "f" * 32


async def test_redis_a_record_from_a_second_process_is_seen_by_the_next_fresh_recall(
    backend: MemoryProvider, redis_store: Store, clock: Clock
) -> None:
    memory = EpisodicMemory(backend, namespace="shared", clock=clock)
    await memory.record(Episode(query="reset the password of a locked account"))
    cluster = redis_store.kind == "cluster"
    script = textwrap.dedent(
        f"""
        import anyio
        from deepcrew_episodic import Episode, EpisodicMemory
        from deepcrew_episodic.providers import RedisMemoryProvider

        async def main():
            async with RedisMemoryProvider({redis_store.target!r}, cluster={cluster}) as p:
                m = EpisodicMemory(p, namespace="shared")
                await m.record(Episode(query="unlock the locked account", outcome="success"))

        anyio.run(main)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    fresh = await same_answers(backend, clock, "shared")
    assert reads_from_the_store(fresh)
    assert next(e.query for e in await fresh.recall("locked account unlock")) == (
        "unlock the locked account"
    )


async def test_redis_deleting_records_by_any_path_takes_their_index_entries(
    backend: MemoryProvider, redis_store: Store, clock: Clock
) -> None:
    stored = await varied_log(backend, clock, "gone", 5, n=40, ring=40)
    memory = EpisodicMemory(backend, namespace="gone", max_episodes=40, clock=clock)
    await backend.delete(["episodic:gone:e:7", "episodic:gone:g:1"])  # a raw delete
    await memory.forget(outcome="abandoned")
    await memory.shrink(30)
    assert reads_from_the_store(await same_answers(backend, clock, "gone", max_episodes=30))
    clock.now += 3 * 86400
    await memory.sweep()
    assert reads_from_the_store(await same_answers(backend, clock, "gone", max_episodes=30))
    await memory.clear()
    client = await raw_client(redis_store)
    left = index_keys(client)
    # What is left of the namespace's index is its watermarks and its revision, nothing of
    # an episode.
    assert all(k.endswith((":w", ":v")) for k in left), left
    assert not await EpisodicMemory(backend, namespace="gone", clock=clock).recall(stored[-1].query)
    await backend.clear()
    assert index_keys(client) == []
    client.close()


async def test_redis_listings_do_not_see_the_index(
    backend: MemoryProvider, redis_store: Store, clock: Clock
) -> None:
    await varied_log(backend, clock, "listed", 6, n=20, ring=50)
    memory = EpisodicMemory(backend, namespace="listed", max_episodes=50, clock=clock)
    client = await raw_client(redis_store)
    assert index_keys(client)
    everything = await backend.keys("")
    assert everything == sorted(everything)
    assert all(k.startswith("episodic:listed:") for k in everything)
    assert await backend.keys("ix:") == []
    assert await EpisodicMemory.namespaces(backend) == ["listed"]
    stats = await memory.stats()
    assert stats.total == len(await EpisodicMemory(backend, namespace="listed").load())
    assert stats.stored_bytes == sum(
        len(k.encode()) + len((v or "").encode())
        for k, v in zip(everything, await backend.retrieve_many(everything), strict=True)
    )
    client.close()


async def test_redis_a_record_deleted_behind_the_library_falls_back_to_the_log(
    backend: MemoryProvider,
    redis_store: Store,
    clock: Clock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    memory = EpisodicMemory(backend, namespace="edited", clock=clock)
    for i in range(20):
        await memory.record(Episode(query=f"refund charge {i}", timestamp=_iso(clock.now - i)))
    client = await raw_client(redis_store)
    tag = "{episodic:edited}" if redis_store.kind == "cluster" else "episodic:edited"
    assert client.delete(f"deepcrew:{tag}:e:20")  # the newest, by hand: its index stays
    client.close()
    with caplog.at_level(logging.WARNING, logger="deepcrew_episodic"):
        fresh = await same_answers(backend, clock, "edited")
    assert fresh.counters.recovered_indexes == 1
    assert any("disagrees with the log" in r.getMessage() for r in caplog.records)


async def test_redis_a_client_passed_in_is_used_for_the_index_reader(
    redis_store: Store, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    import redis.asyncio as redis_asyncio
    from redis import __version__
    from redis.asyncio.cluster import RedisCluster
    from redis.driver_info import DriverInfo

    from deepcrew_episodic.providers import RedisMemoryProvider

    # Given its driver info, redis-py does not read its version from the disk on the loop.
    info = {"driver_info": DriverInfo(lib_version=__version__)}
    if redis_store.kind == "cluster":
        client: Any = RedisCluster.from_url(redis_store.target, decode_responses=True, **info)
    else:
        client = redis_asyncio.Redis.from_url(redis_store.target, decode_responses=True, **info)
    async with RedisMemoryProvider(client=client) as backend:
        assert backend.recall_index
        await varied_log(backend, clock, "given", 8, n=20, ring=50)
        assert reads_from_the_store(await same_answers(backend, clock, "given", max_episodes=50))
    await client.aclose()

    from redis.credentials import CredentialProvider

    class Credentials(CredentialProvider):
        def get_credentials(self) -> tuple[str]:
            return ("",)

    if redis_store.kind == "cluster":
        odd: Any = RedisCluster.from_url(
            redis_store.target, credential_provider=Credentials(), **info
        )
    else:
        odd = redis_asyncio.Redis.from_url(
            redis_store.target, credential_provider=Credentials(), **info
        )
    with caplog.at_level(logging.WARNING, logger="deepcrew_episodic"):
        backend = RedisMemoryProvider(client=odd)
    assert not backend.recall_index
    assert type(backend).recall_index  # the class still declares it
    assert any("no recall index reader" in r.getMessage() for r in caplog.records)
    await backend.aclose()
    await odd.aclose()


def open_connections(store: Store, ports: list[int]) -> int:
    """How many connections the store's servers hold open, not counting the one asking."""
    import redis

    total = 0
    for port in ports:
        with redis.Redis(host="127.0.0.1", port=port) as client:
            total += len(client.client_list()) - 1
    return total


@pytest.mark.parametrize("how", ["url", "client passed in"])
async def test_redis_closing_the_provider_closes_every_connection_its_recalls_opened(
    redis_store: Store, clock: Clock, request: pytest.FixtureRequest, how: str
) -> None:
    import anyio
    import redis.asyncio as redis_asyncio
    from redis import __version__
    from redis.asyncio.cluster import RedisCluster
    from redis.driver_info import DriverInfo

    from deepcrew_episodic.providers import RedisMemoryProvider

    cluster = redis_store.kind == "cluster"
    ports = (
        request.getfixturevalue("redis_cluster_ports")
        if cluster
        else [int(redis_store.target.rsplit(":", 1)[1].split("/")[0])]
    )
    info = {"driver_info": DriverInfo(lib_version=__version__)}
    client: Any = None
    if how == "client passed in":
        client = (
            RedisCluster.from_url(redis_store.target, decode_responses=True, **info)
            if cluster
            else redis_asyncio.Redis.from_url(redis_store.target, decode_responses=True, **info)
        )
    # A connection left open is closed by the collector once it reaches the client's cycles,
    # and then often finalized first, unclosed, in whatever test runs at the time: no
    # collection here, so that what the provider left open is still open when counted.
    gc.disable()
    try:
        before = open_connections(redis_store, ports)
        backend = (
            RedisMemoryProvider(client=client)
            if client is not None
            else RedisMemoryProvider(redis_store.target, cluster=cluster)
        )
        async with backend:
            await varied_log(backend, clock, "closing", 8, n=20, ring=50)
            assert reads_from_the_store(await same_answers(backend, clock, "closing"))
        if client is not None:
            await client.aclose()
        for _ in range(500):  # the servers see the sockets close a moment later (10 s at most)
            left = open_connections(redis_store, ports) - before
            if left <= 0:
                break
            await anyio.sleep(0.02)
        assert left == 0, f"{left} connection(s) still open after the provider was closed"
    finally:
        gc.enable()


async def test_redis_a_long_scan_counts_matches_in_the_store_and_ranks_as_the_log(
    backend: MemoryProvider, clock: Clock
) -> None:
    rng = random.Random(12)
    memory = EpisodicMemory(backend, namespace="long", max_episodes=400, clock=clock)
    for i in range(300):
        words = ["refund", "charge", *rng.sample(WORDS, 4)]
        await memory.record(
            Episode(
                query=" ".join(words) + f" order {i % 7}",
                outcome=rng.choice(OUTCOMES),
                timestamp=_iso(clock.now - rng.uniform(0, 90) * 86400),
            )
        )
    fresh = EpisodicMemory(backend, namespace="long", max_episodes=400, clock=clock)
    loaded = EpisodicMemory(backend, namespace="long", max_episodes=400, clock=clock)
    await loaded.load()
    for query, k in [
        ("refund charge deploy staging rollback invoice timeout database order", 40),
        ("refund charge", 120),
        ("refund charge order 3", 10),
    ]:
        for intent in ("any", "what_failed"):
            expected = parts(await loaded.explain(query, top_k=k, intent=intent))
            assert parts(await fresh.explain(query, top_k=k, intent=intent)) == expected
    assert reads_from_the_store(fresh)


async def test_redis_recall_while_another_memory_writes_answers_or_falls_back(
    backend: MemoryProvider, clock: Clock
) -> None:
    writer = EpisodicMemory(backend, namespace="busy", max_episodes=30, clock=clock)
    for i in range(30):
        await writer.record(Episode(query=f"refund charge case {i}", outcome="success"))
    found: list[int] = []

    async def write() -> None:
        for i in range(60):  # the ring is full: every record evicts one
            await writer.record(Episode(query=f"refund charge later {i}", outcome="failure"))

    async def read() -> None:
        for _ in range(30):
            reader = EpisodicMemory(backend, namespace="busy", max_episodes=30, clock=clock)
            ranking = await reader.explain("refund charge", top_k=10)
            assert len(ranking) == 10
            assert len({s.episode.id for s in ranking}) == 10
            found.append(reader.counters.recovered_indexes)

    import anyio

    async with anyio.create_task_group() as tg:
        tg.start_soon(write)
        tg.start_soon(read)
    assert len(found) == 30
    assert reads_from_the_store(await same_answers(backend, clock, "busy", max_episodes=30))
