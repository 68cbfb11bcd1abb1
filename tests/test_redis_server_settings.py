"""A log on a real redis-server whose own settings or life can lose keys: a maxmemory policy
that evicts, a restart from an older RDB snapshot, a database full of other keys."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
import pytest
from redis_server import free_port, redis_server, stop, unavailable, wait_for

from deepcrew_episodic import (
    Episode,
    EpisodicMemory,
    StorageError,
    StorageTimeoutError,
    StorageUnavailableError,
)

redis_asyncio = pytest.importorskip("redis.asyncio")
from deepcrew_episodic.providers import RedisMemoryProvider  # noqa: E402

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis-py is asyncio-only


def ep(query: str, **fields: Any) -> Episode:
    return Episode(query=query, response=fields.pop("response", "ok"), **fields)


@asynccontextmanager
async def raw_client(port: int) -> AsyncIterator[Any]:
    client = redis_asyncio.Redis(port=port, decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()


# --- eviction ---------------------------------------------------------------------------------


async def test_an_evicting_server_is_named_in_a_warning_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with redis_server("--maxmemory", "8mb", "--maxmemory-policy", "allkeys-lru") as (port, _):
        async with RedisMemoryProvider(f"redis://127.0.0.1:{port}/0") as backend:
            memory = EpisodicMemory(backend, namespace="evict")
            with caplog.at_level(logging.WARNING, logger="deepcrew_episodic"):
                await memory.load()
                await memory.load()
            assert memory.counters.unsafe_settings == 1
            assert "allkeys-lru" in caplog.text
            assert "noeviction" in caplog.text
            # a second memory on the same provider counts it too; the server is asked once
            other = EpisodicMemory(backend, namespace="other")
            await other.load()
            assert other.counters.unsafe_settings == 1


@pytest.mark.parametrize("policy", ["noeviction", "volatile-lru"])
async def test_a_server_that_keeps_keys_without_a_ttl_raises_no_warning(policy: str) -> None:
    with redis_server("--maxmemory", "8mb", "--maxmemory-policy", policy) as (port, _):
        async with RedisMemoryProvider(f"redis://127.0.0.1:{port}/0") as backend:
            memory = EpisodicMemory(backend, namespace="safe")
            await memory.record(ep("restart the worker"))
            assert await memory.load()
            assert memory.counters.unsafe_settings == 0


async def test_a_server_that_refuses_config_get_is_only_a_debug_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with redis_server("--rename-command", "CONFIG", "") as (port, _):
        async with RedisMemoryProvider(f"redis://127.0.0.1:{port}/0") as backend:
            memory = EpisodicMemory(backend, namespace="managed")
            with caplog.at_level(logging.DEBUG, logger="deepcrew_episodic"):
                await memory.record(ep("rotate the keys"))
                assert len(await memory.load()) == 1
            assert memory.counters.unsafe_settings == 0
            refused = [r for r in caplog.records if "CONFIG GET" in r.getMessage()]
            assert refused
            assert all(r.levelno == logging.DEBUG for r in refused)


async def test_keys_evicted_by_allkeys_lru_never_let_a_record_overwrite_a_stored_one() -> None:
    """The server evicts the log's counter, change token and ring size (the idlest keys):
    every episode left is still shown, and the next records go after them."""
    server = ("--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru")
    with redis_server(*server, "--maxmemory-samples", "10") as (port, _):
        url = f"redis://127.0.0.1:{port}/0"
        async with RedisMemoryProvider(url) as backend, raw_client(port) as raw:
            writer = EpisodicMemory(backend, namespace="lru", max_episodes=50)
            for i in range(10):
                await writer.record(ep(f"deploy build {i}"))
            await anyio.sleep(2.1)  # the LRU clock counts seconds: the index keys grow idle
            entries = [f"deepcrew:episodic:lru:e:{i}" for i in range(1, 11)]
            filler = "x" * 20_000
            n = 0
            while await raw.exists("deepcrew:episodic:lru:__seq__"):
                await raw.mget(entries)  # the episodes stay warm, the counter goes cold
                async with raw.pipeline(transaction=False) as pipe:
                    for _ in range(20):
                        pipe.set(f"cache:{n}", filler)
                        n += 1
                    await pipe.execute()
                assert n < 20_000, "the server never evicted the counter"
            await raw.delete(*[f"cache:{i}" for i in range(n)])  # room again
            survivors = {k: v for k, v in zip(entries, await raw.mget(entries), strict=False) if v}
            assert survivors, "every episode was evicted too; nothing left to protect"
            # the reader that knew the log still shows every episode left
            shown = [e.query for e in await writer.load()]
            assert len(shown) == len(survivors)
            late = EpisodicMemory(backend, namespace="lru", max_episodes=50)
            for i in range(3):
                await late.record(ep(f"hotfix {i}"))
            # Every episode left is untouched (a number whose episode was evicted with the
            # counter may be used again: nothing is stored there to overwrite).
            kept = list(survivors)
            assert dict(zip(kept, await raw.mget(kept), strict=True)) == survivors
            for memory in (EpisodicMemory(backend, namespace="lru"), writer, late):
                queries = [e.query for e in await memory.load()]
                assert queries == [*shown, "hotfix 0", "hotfix 1", "hotfix 2"]


# --- a restart from an older snapshot -------------------------------------------------------


@contextmanager
def persistent_server() -> Iterator[tuple[int, str, list[subprocess.Popen[bytes]]]]:
    """A redis-server that keeps its RDB file in a directory of its own, so that it can be
    killed and started again from it on the same port."""
    binary = shutil.which("redis-server")
    if binary is None:
        unavailable("redis-server is not installed")
        raise AssertionError("unreachable")
    workdir = tempfile.mkdtemp(prefix="redis-rdb-")
    port = free_port()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        yield port, workdir, procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                stop(proc)
        shutil.rmtree(workdir, ignore_errors=True)


def start(binary_port: int, workdir: str, procs: list[subprocess.Popen[bytes]]) -> None:
    proc = subprocess.Popen(
        [
            shutil.which("redis-server") or "redis-server",
            "--port",
            str(binary_port),
            "--bind",
            "127.0.0.1",
            "--dir",
            workdir,
            "--dbfilename",
            "dump.rdb",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    procs.append(proc)
    wait_for(binary_port, proc)


async def until_up(memory: EpisodicMemory) -> list[Episode]:
    """The first read after the server came back: redis-py's pooled connections are dead."""
    for _ in range(20):
        try:
            return await memory.load()
        except StorageError:
            await anyio.sleep(0.1)
    return await memory.load()


async def test_a_reader_that_stays_up_follows_a_restart_from_an_older_rdb_snapshot() -> None:
    with persistent_server() as (port, workdir, procs):
        start(port, workdir, procs)
        url = f"redis://127.0.0.1:{port}/0"
        async with (
            RedisMemoryProvider(url) as reader_store,
            RedisMemoryProvider(url) as writer_store,
        ):
            writer = EpisodicMemory(writer_store, namespace="rdb")
            for i in range(5):
                await writer.record(ep(f"kept {i}"))
            kept = (await writer.load())[0]
            await writer.grade(kept.id, outcome="success")
            async with raw_client(port) as raw:
                assert await raw.save()
            for i in range(5):
                await writer.record(ep(f"lost {i}"))
            lost = (await writer.load())[6]
            await writer.grade(lost.id, outcome="success")
            reader = EpisodicMemory(reader_store, namespace="rdb")
            assert len(await reader.load()) == 10
            os.kill(procs[-1].pid, signal.SIGKILL)
            procs[-1].wait()
            start(port, workdir, procs)  # the same generation token, an older counter
            again = EpisodicMemory(writer_store, namespace="rdb")
            assert len(await until_up(again)) == 5
            for i in range(7):
                await again.record(ep(f"new {i}"))
            expected = [f"kept {i}" for i in range(5)] + [f"new {i}" for i in range(7)]
            shown = [e.query for e in await until_up(reader)]
            assert shown == expected
            assert reader.counters.rewound_logs == 1
            assert [g.episode_id for g in await reader.grades()] == [kept.id]
            assert (await reader.stats()).total == 12
            found = [s.episode.query for s in await reader.explain("lost new kept", top_k=20)]
            assert sorted(found) == sorted(expected)


# --- round trips in a database full of other keys --------------------------------------------


async def commands(raw: Any) -> dict[str, int]:
    stats = await raw.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def spent(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    used = {k: after[k] - before.get(k, 0) for k in after}
    return {k: v for k, v in used.items() if v and k != "info"}


async def test_no_recall_path_scans_a_database_full_of_other_keys() -> None:
    with redis_server() as (port, _):
        async with RedisMemoryProvider(f"redis://127.0.0.1:{port}/0") as backend:
            async with raw_client(port) as raw:
                for start_at in range(0, 100_000, 5_000):
                    await raw.mset(
                        {f"app:session:{i}": "v" for i in range(start_at, start_at + 5_000)}
                    )
                memory = EpisodicMemory(backend, namespace="busy")
                for i in range(20):
                    await memory.record(ep(f"restart the worker pool {i}"))
                first = await memory.recall("restart the worker pool")
                other = EpisodicMemory(backend, namespace="busy")
                await other.recall("restart")
                costs = []
                for round_ in range(3):
                    await memory.used([first[round_].id])
                    await memory.grade(first[round_].id, outcome="success")
                    for reader in (memory, other):
                        before = await commands(raw)
                        await reader.recall("restart the worker pool")
                        await reader.explain("worker pool")
                        await reader.load()
                        await reader.grades()
                        costs.append(spent(before, await commands(raw)))
            for cost in costs:
                assert "scan" not in cost, cost
                # A round that read the store's recall index (scripts: the commands they run
                # inside count too) reads what the query touches, never the other keys.
                assert sum(cost.values()) <= (8 if "evalsha" not in cost else 400), cost
            assert [c for _, c in (await other.stats()).most_used] == [1, 1, 1]


# --- a reader that stays up while grades land -----------------------------------------------


async def test_a_reader_syncing_while_150_grades_land_reads_every_one(redis_url: str) -> None:
    """Each grade is two steps on Redis (its number, then its record); a reader that syncs
    all the while, between those steps too, ends with every grade applied."""
    async with RedisMemoryProvider(redis_url) as writers, RedisMemoryProvider(redis_url) as mine:
        await writers.delete(await writers.keys("episodic:race:"))
        writer = EpisodicMemory(writers, namespace="race", max_episodes=200)
        ids = [(await writer.record(ep(f"job {i}", outcome="failure"))).id for i in range(150)]
        reader = EpisodicMemory(mine, namespace="race", max_episodes=200)
        await reader.load()
        done = anyio.Event()

        async def grade_some(part: list[str]) -> None:
            memory = EpisodicMemory(writers, namespace="race", max_episodes=200)
            for episode_id in part:
                await memory.grade(episode_id, outcome="success")

        async def read_all_along() -> None:
            while not done.is_set():
                await reader.load()

        async with anyio.create_task_group() as tg:
            tg.start_soon(read_all_along)
            async with anyio.create_task_group() as graders:
                for k in range(5):
                    graders.start_soon(grade_some, ids[k::5])
            done.set()
        outcomes = [e.outcome for e in await reader.load()]
        assert outcomes.count("success") == 150
        assert len(await reader.grades()) == 150
        assert reader.counters.missing_records == 0
        assert reader.counters.rewound_logs == 0


# --- a server that goes away, or stalls ----------------------------------------------------


@pytest.mark.redis
async def test_a_server_that_went_away_is_unavailable_and_one_that_stalls_a_timeout() -> None:
    with redis_server() as (port, proc):
        # (redis-py reads socket_timeout from the URL: seconds a reply may take)
        url = f"redis://127.0.0.1:{port}/0?socket_timeout=0.3"
        async with RedisMemoryProvider(url) as backend, raw_client(port) as raw:
            await backend.write({"k": "v"})
            # Every client's commands wait until the pause ends (it has begun when it answers).
            await raw.execute_command("CLIENT", "PAUSE", "1000", "ALL")
            with pytest.raises(StorageTimeoutError, match="redis"):
                await backend.retrieve("k")
            await anyio.sleep(1.1)
            assert await backend.retrieve("k") == "v"
            stop(proc)
            with pytest.raises(StorageUnavailableError, match="redis"):
                await backend.retrieve("k")
