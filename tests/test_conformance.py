"""The storage contract, stated once and run against every provider (see ``stores.KINDS``).

A provider that does not pass this suite does not ship.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path

import anyio
import pytest
from stores import Store

from deepcrew_episodic import (
    ConfigurationError,
    Episode,
    EpisodicMemory,
    InvalidEpisodeError,
)
from deepcrew_episodic.providers import InMemoryProvider, MemoryProvider
from deepcrew_episodic.providers._base import as_provider

pytestmark = pytest.mark.anyio
WORKER = str(Path(__file__).with_name("_worker.py"))


def ep(query: str, **fields: object) -> Episode:
    return Episode(query=query, response=fields.pop("response", "ok"), **fields)  # type: ignore[arg-type]


# --- deepcrew-ai's key/value contract -----------------------------------------------------


async def test_store_retrieve_search_clear(provider: MemoryProvider) -> None:
    await provider.store("b:key", "Hello World")
    await provider.store("a:other", "nothing here")
    await provider.store("c:third", "say hello")
    assert await provider.retrieve("b:key") == "Hello World"
    assert await provider.retrieve("missing") is None
    await provider.store("b:key", "replaced")
    assert await provider.retrieve("b:key") == "replaced"
    # case-insensitive substring on key or value, sorted by key, cut at top_k
    assert await provider.search("HELLO") == [("c:third", "say hello")]
    assert await provider.search(":", top_k=2) == [
        ("a:other", "nothing here"),
        ("b:key", "replaced"),
    ]
    await provider.clear()
    assert await provider.retrieve("b:key") is None
    assert await provider.search("") == []


async def test_batch_capabilities(provider: MemoryProvider) -> None:
    await provider.write({"p:1": "one", "p:2": "two", "q:1": "other"})
    assert await provider.retrieve_many(["p:2", "nope", "p:1"]) == ["two", None, "one"]
    assert await provider.retrieve_many([]) == []
    assert await provider.keys("p:") == ["p:1", "p:2"]
    await provider.write({"p:3": "three"}, delete=["p:1"])
    assert await provider.retrieve_many(["p:1", "p:3"]) == [None, "three"]
    await provider.delete(["p:2", "absent"])
    assert await provider.keys("p:") == ["p:3"]
    assert await provider.keys("q:") == ["q:1"]


async def test_increment_starts_at_initial_and_is_atomic(provider: MemoryProvider) -> None:
    assert await provider.increment("n", initial=41) == 42
    assert await provider.increment("n", initial=1000) == 43  # initial only applies once
    results: list[int] = []

    async def bump() -> None:
        results.append(await provider.increment("m"))

    async with anyio.create_task_group() as tg:
        for _ in range(200):
            tg.start_soon(bump)
    assert sorted(results) == list(range(1, 201))


# --- 1. no lost or duplicated episodes ----------------------------------------------------


@pytest.mark.parametrize("max_episodes", [1000, 100])
async def test_concurrent_records_in_one_process(
    provider: MemoryProvider, max_episodes: int
) -> None:
    memory = EpisodicMemory(provider, namespace="conc", max_episodes=max_episodes)

    async def one(i: int) -> None:
        await memory.record(ep(f"task {i}", tags=[f"n{i}"]))

    async with anyio.create_task_group() as tg:
        for i in range(500):
            tg.start_soon(one, i)
    fresh = EpisodicMemory(provider, namespace="conc", max_episodes=max_episodes)
    episodes = await fresh.load()
    assert len(episodes) == min(500, max_episodes)
    assert len({e.id for e in episodes}) == len(episodes)
    assert len({e.query for e in episodes}) == len(episodes)
    if max_episodes >= 500:
        assert {e.query for e in episodes} == {f"task {i}" for i in range(500)}
    await _assert_the_newest_are_kept(provider, "conc", written=500, kept=min(500, max_episodes))


async def _assert_the_newest_are_kept(
    provider: MemoryProvider, namespace: str, written: int, kept: int
) -> None:
    """The last *kept* sequence numbers hold an episode: the newest ones.

    A provider that appends in one atomic step (``atomic_increment_and_write``: dict, file,
    SQLite) holds nothing else. One that appends in two (Redis: increment, then write) can be
    left a payload below the ring when a slow writer's write lands after its own eviction: no
    read path shows it, and ``sweep()`` deletes it.
    """
    prefix = f"episodic:{namespace}:e:"
    newest = set(range(written - kept + 1, written + 1))
    stored = {int(k[len(prefix) :]) for k in await provider.keys(prefix)}
    assert newest <= stored
    leftovers = stored - newest
    if not provider.atomic_increment_and_write:
        assert all(seq < min(newest) for seq in leftovers)
        memory = EpisodicMemory(provider, namespace=namespace, max_episodes=kept)
        assert await memory.sweep() == len(leftovers)
        assert {int(k[len(prefix) :]) for k in await provider.keys(prefix)} == newest
    else:
        assert leftovers == set()


async def _run_workers(
    store: Store, namespace: str, max_episodes: int, procs: int, each: int
) -> None:
    commands = [
        [
            sys.executable,
            WORKER,
            store.kind,
            store.target,
            namespace,
            str(max_episodes),
            str(each),
            f"w{p}",
        ]
        for p in range(procs)
    ]
    children = [
        subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for c in commands
    ]
    for child in children:
        _, err = await anyio.to_thread.run_sync(child.communicate)
        assert child.returncode == 0, err.decode()[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("max_episodes", [2000, 150])
async def test_concurrent_records_from_many_processes(store: Store, max_episodes: int) -> None:
    if not store.shared_across_processes:
        pytest.skip(f"{store.kind} is private to its process")
    await _run_workers(store, "procs", max_episodes, procs=8, each=200)
    async with store.open() as provider:
        episodes = await EpisodicMemory(
            provider, namespace="procs", max_episodes=max_episodes
        ).load()
        await _assert_the_newest_are_kept(provider, "procs", 1600, min(1600, max_episodes))
    assert len(episodes) == min(1600, max_episodes)
    assert len({e.id for e in episodes}) == len(episodes)
    if max_episodes >= 1600:
        expected = {(f"w{p}", i) for p in range(8) for i in range(200)}
        assert {(e.tags[0], int(e.query.split()[3])) for e in episodes} == expected


# --- 2. crash safety ----------------------------------------------------------------------


@pytest.mark.slow
async def test_sigkill_mid_record_never_leaves_an_unreadable_log(store: Store) -> None:
    if not store.shared_across_processes:
        pytest.skip(f"{store.kind} is private to its process")
    rng = random.Random(7)
    total_seen = 0
    for round_ in range(50):
        child = subprocess.Popen(
            [
                sys.executable,
                WORKER,
                store.kind,
                store.target,
                "crash",
                "40",
                "0",
                f"k{round_}",
                "forever",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert child.stdout is not None
        line = await anyio.to_thread.run_sync(child.stdout.readline)
        assert line.strip() == b"ready", child.stderr.read().decode() if child.stderr else ""
        await anyio.sleep(rng.uniform(0.005, 0.08))
        child.send_signal(signal.SIGKILL)
        await anyio.to_thread.run_sync(child.communicate)
        async with store.open() as provider:
            memory = EpisodicMemory(provider, namespace="crash", max_episodes=40)
            episodes = await memory.load()  # must not raise
            assert memory.counters.corrupt_records == 0
            assert memory.counters.recovered_indexes == 0
            for e in episodes:  # each one whole: a worker's or one of ours
                assert e.id
                assert e.timestamp
                assert e.response == ("ok" if e.query.startswith("after kill") else "x" * 300)
            total_seen = max(total_seen, len(episodes))
            # and the log stays writable
            await memory.record(ep(f"after kill {round_}"))
    assert total_seen > 0
    if store.kind == "file":
        json.loads(Path(store.target).read_text())
        # every write removed the temporary files (whole copies) of the killed writers
        assert sorted(p.name for p in Path(store.target).parent.glob(".*.tmp")) == []


# --- 3. constant round trips ------------------------------------------------------------


class Counting(MemoryProvider):
    """Counts provider calls (each one is a round trip on a networked store)."""

    def __init__(self, inner: MemoryProvider) -> None:
        self.inner = inner
        self.calls: list[str] = []

    async def store(self, key: str, value: str) -> None:
        self.calls.append("store")
        await self.inner.store(key, value)

    async def retrieve(self, key: str) -> str | None:
        self.calls.append("retrieve")
        return await self.inner.retrieve(key)

    async def search(self, query: str, top_k: int = 5) -> list[tuple[str, str]]:
        self.calls.append("search")
        return await self.inner.search(query, top_k)

    async def clear(self) -> None:
        self.calls.append("clear")
        await self.inner.clear()

    async def retrieve_many(self, keys: Sequence[str]) -> list[str | None]:
        self.calls.append("retrieve_many")
        return await self.inner.retrieve_many(keys)

    async def write(self, items: Mapping[str, str], delete: Collection[str] = ()) -> None:
        self.calls.append("write")
        await self.inner.write(items, delete)

    async def delete(self, keys: Iterable[str]) -> None:
        self.calls.append("delete")
        await self.inner.delete(keys)

    async def keys(self, prefix: str) -> list[str]:
        self.calls.append("keys")
        return await self.inner.keys(prefix)

    async def increment(self, key: str, *, initial: int = 0) -> int:
        self.calls.append("increment")
        return await self.inner.increment(key, initial=initial)


async def _calls_for_cold_reads(
    provider: MemoryProvider, n: int
) -> tuple[list[str], list[str], list[str]]:
    namespace = f"rt{n}"
    writer = EpisodicMemory(provider, namespace=namespace, max_episodes=1000)
    for i in range(n):
        await writer.record(ep(f"deploy service {i}", tags=["devops"]))
    counting = Counting(provider)
    reader = EpisodicMemory(counting, namespace=namespace, max_episodes=1000)
    await reader.recall("deploy the service")
    cold = list(counting.calls)
    counting.calls.clear()
    await reader.load()
    warm = list(counting.calls)
    counting.calls.clear()
    await writer.record(ep("deploy service new"))
    await reader.recall("deploy")
    after_write = list(counting.calls)
    return cold, warm, after_write


async def test_recall_and_load_cost_constant_round_trips(provider: MemoryProvider) -> None:
    small = await _calls_for_cold_reads(provider, 5)
    large = await _calls_for_cold_reads(provider, 300)
    assert small == large
    cold, warm, after_write = large
    assert cold == ["retrieve_many", "retrieve_many"]  # the index keys, then every live episode
    assert warm == ["retrieve_many"]  # nothing new: the index keys only
    assert after_write == ["retrieve_many", "retrieve_many"]  # index keys, then the one new episode


# --- 4. clear -------------------------------------------------------------------------------


async def test_clear_deletes_every_payload_of_its_namespace_only(provider: MemoryProvider) -> None:
    a = EpisodicMemory(provider, namespace="a", max_episodes=5)
    a2 = EpisodicMemory(provider, namespace="a-2", max_episodes=5)
    b = EpisodicMemory(provider, namespace="b")
    await provider.store("unrelated", "keep me")
    await provider.store("episodic:a", "a key that only looks related")
    for i in range(8):  # wraps the ring: evicted payloads must be gone too
        await a.record(ep(f"alpha {i}"))
    await a2.record(ep("alpha two"))
    await b.record(ep("beta"))
    before_b = await provider.keys("episodic:b:")
    await a.clear()
    assert await a.load() == []
    remaining = await provider.keys("episodic:a:")
    assert set(remaining) <= {"episodic:a:__seq__", "episodic:a:__gen__"}
    for key in remaining:  # only the counter and the change token: no payload
        assert "alpha" not in (await provider.retrieve(key) or "")
    assert await provider.retrieve("unrelated") == "keep me"
    assert await provider.retrieve("episodic:a") == "a key that only looks related"
    assert [e.query for e in await a2.load()] == ["alpha two"]
    assert await provider.keys("episodic:b:") == before_b
    assert [e.query for e in await b.load()] == ["beta"]
    # a cleared log keeps working, and a reader that cached it sees the clear
    await a.record(ep("alpha again"))
    assert [e.query for e in await a.load()] == ["alpha again"]


async def test_clear_is_seen_by_other_readers(provider: MemoryProvider) -> None:
    writer = EpisodicMemory(provider, namespace="shared")
    reader = EpisodicMemory(provider, namespace="shared")
    for i in range(3):
        await writer.record(ep(f"gamma {i}"))
    assert len(await reader.recall("gamma")) == 3
    await writer.clear()
    for i in range(3):
        await writer.record(ep(f"delta {i}"))
    assert await reader.recall("gamma") == []
    assert len(await reader.load()) == 3


# --- 5. corrupt data ------------------------------------------------------------------------


async def test_corrupt_episode_is_skipped_counted_and_left_in_place(
    provider: MemoryProvider,
) -> None:
    memory = EpisodicMemory(provider, namespace="bad")
    for i in range(3):
        await memory.record(ep(f"refund order {i}"))
    await provider.store("episodic:bad:e:2", '{"query": "half a reco')
    fresh = EpisodicMemory(provider, namespace="bad")
    assert [e.query for e in await fresh.load()] == ["refund order 0", "refund order 2"]
    assert fresh.counters.corrupt_records == 1
    await fresh.recall("refund")  # reported once, not on every read
    assert fresh.counters.corrupt_records == 1
    await fresh.record(ep("refund order 3"))
    assert await provider.retrieve("episodic:bad:e:2") == '{"query": "half a reco'


async def test_corrupt_counter_loses_no_episode(provider: MemoryProvider) -> None:
    memory = EpisodicMemory(provider, namespace="idx")
    for i in range(4):
        await memory.record(ep(f"invoice {i}"))
    await provider.store("episodic:idx:__seq__", "not-a-number")
    fresh = EpisodicMemory(provider, namespace="idx")
    assert [e.query for e in await fresh.load()] == [f"invoice {i}" for i in range(4)]
    assert fresh.counters.recovered_indexes >= 1
    await fresh.record(ep("invoice 4"))  # repairs the counter, overwrites nothing
    assert [e.query for e in await EpisodicMemory(provider, namespace="idx").load()] == [
        f"invoice {i}" for i in range(5)
    ]


async def test_corrupt_legacy_index_loses_no_episode(provider: MemoryProvider) -> None:
    # deepcrew-ai's layout: slots 0..n-1 plus a __meta__ index
    for slot in range(3):
        body = {
            "query": f"legacy {slot}",
            "response": "r",
            "timestamp": f"2026-01-0{slot + 1}T00:00:00Z",
        }
        await provider.store(f"episodic:old:{slot}", json.dumps(body))
    await provider.store("episodic:old:__meta__", "{corrupt")
    memory = EpisodicMemory(provider, namespace="old")
    assert [e.query for e in await memory.load()] == ["legacy 0", "legacy 1", "legacy 2"]
    assert memory.counters.recovered_indexes == 1


# --- 6. namespaces ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "namespace",
    ["", "ns\n", "a\x1bb", "a\u200bb", "a\u202eb", "a\ud800", "x" * 257, None, 42],
)
async def test_bad_namespace_raises_value_error(
    provider: MemoryProvider, namespace: object
) -> None:
    with pytest.raises(ValueError, match="namespace"):
        EpisodicMemory(provider, namespace=namespace)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        EpisodicMemory(provider, namespace=namespace)  # type: ignore[arg-type]


async def test_namespaces_are_isolated(provider: MemoryProvider) -> None:
    a = EpisodicMemory(provider, namespace="team-a")
    b = EpisodicMemory(provider, namespace="team-b")
    await a.record(ep("rotate the api key"))
    assert await b.recall("rotate the api key") == []
    assert await b.load() == []


# --- 7. bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"outcome": "great"}, "outcome"),
        ({"tags": "billing"}, "tags"),
        ({"tags": ["ok", 3]}, "tags.1"),
        ({"score": "high"}, "score"),
        ({"score": float("nan")}, "score"),
        ({"tools_used": [None]}, "tools_used.0"),
        ({"timestamp": "yesterday"}, "timestamp"),
    ],
)
async def test_invalid_episode_names_the_field_and_writes_nothing(
    provider: MemoryProvider, fields: dict[str, object], named: str
) -> None:
    memory = EpisodicMemory(provider, namespace="val")
    await memory.record(ep("kept"))
    before = await provider.keys("")
    with pytest.raises(InvalidEpisodeError, match=named.replace(".", r"\.")):
        Episode(query="q", **fields)  # type: ignore[arg-type]
    with pytest.raises(InvalidEpisodeError, match=named.replace(".", r"\.")):
        await memory.record({"query": "q", "response": "r", **fields})
    assert await provider.keys("") == before
    assert [e.query for e in await memory.load()] == ["kept"]


# --- ring buffer ------------------------------------------------------------------------------


async def test_ring_keeps_the_newest_and_reopening_with_another_size_keeps_them(
    provider: MemoryProvider,
) -> None:
    memory = EpisodicMemory(provider, namespace="ring", max_episodes=10)
    for i in range(25):
        await memory.record(ep(f"step {i}"))
    assert [e.query for e in await memory.load()] == [f"step {i}" for i in range(15, 25)]
    smaller = EpisodicMemory(provider, namespace="ring", max_episodes=4)
    assert [e.query for e in await smaller.load()] == [f"step {i}" for i in range(21, 25)]
    bigger = EpisodicMemory(provider, namespace="ring", max_episodes=50)
    assert [e.query for e in await bigger.load()] == [f"step {i}" for i in range(15, 25)]
    await bigger.record(ep("step 25"))
    assert [e.query for e in await bigger.load()][-2:] == ["step 24", "step 25"]


async def test_record_fills_id_and_timestamp_and_round_trips(provider: MemoryProvider) -> None:
    memory = EpisodicMemory(provider, namespace="rt")
    original = Episode(
        query="Rotate the billing API key",
        response="Rotated with zero downtime",
        outcome="success",
        score=0.9,
        tools_used=["vault"],
        tags=["billing"],
        agent_id="ops",
    )
    stored = await memory.record(original)
    assert stored.id
    assert stored.timestamp.endswith("Z")
    # deepcrew-ai fills these in on the caller's object too; the rest of it is left as given
    assert (original.id, original.timestamp) == (stored.id, stored.timestamp)
    (loaded,) = await EpisodicMemory(provider, namespace="rt").load()
    assert loaded == stored


async def test_unknown_fields_from_a_newer_writer_decode(provider: MemoryProvider) -> None:
    memory = EpisodicMemory(provider, namespace="newer")
    await memory.record(ep("first"))
    body = {"query": "from the future", "response": "r", "outcome": "success", "sentiment": 0.4}
    await provider.write({"episodic:newer:e:2": json.dumps(body)})
    await provider.store("episodic:newer:__seq__", "2")
    loaded = await EpisodicMemory(provider, namespace="newer").load()
    assert [e.query for e in loaded] == ["first", "from the future"]
    assert loaded[1].outcome == "success"


# --- compare-and-set (write_if) -------------------------------------------------------------


async def test_write_if_sets_only_when_every_expected_value_holds(provider: MemoryProvider) -> None:
    # None: absent, or "" (what the portable delete leaves)
    assert await provider.write_if({"episodic:cas:a": None}, {"episodic:cas:a": "first"}) is True
    assert await provider.write_if({"episodic:cas:a": None}, {"episodic:cas:a": "second"}) is False
    assert await provider.retrieve("episodic:cas:a") == "first"
    await provider.store("episodic:cas:empty", "")
    assert (
        await provider.write_if({"episodic:cas:empty": None}, {"episodic:cas:empty": "taken"})
        is True
    )
    assert await provider.retrieve("episodic:cas:empty") == "taken"
    # "" expects "" exactly, not an absent key
    assert (
        await provider.write_if({"episodic:cas:absent": ""}, {"episodic:cas:absent": "x"}) is False
    )
    assert await provider.retrieve("episodic:cas:absent") is None
    await provider.store("episodic:cas:blank", "")
    assert await provider.write_if({"episodic:cas:blank": ""}, {"episodic:cas:blank": "x"}) is True

    # several keys: one mismatch changes nothing at all (no store, no delete)
    await provider.write(
        {"episodic:cas:1": "one", "episodic:cas:2": "two", "episodic:cas:gone": "doomed"}
    )
    before = await provider.keys("episodic:cas:")
    assert not await provider.write_if(
        {"episodic:cas:1": "one", "episodic:cas:2": "TWO", "episodic:cas:3": None},
        {"episodic:cas:new": "x", "episodic:cas:1": "changed"},
        ["episodic:cas:gone"],
    )
    assert await provider.keys("episodic:cas:") == before
    assert await provider.retrieve_many(
        ["episodic:cas:1", "episodic:cas:gone", "episodic:cas:new"]
    ) == ["one", "doomed", None]
    # all match: items stored, deletes done, and an item named in delete is stored
    assert await provider.write_if(
        {"episodic:cas:1": "one", "episodic:cas:2": "two", "episodic:cas:3": None},
        {"episodic:cas:new": "x", "episodic:cas:1": "changed"},
        ["episodic:cas:gone", "episodic:cas:1", "episodic:cas:never-was"],
    )
    assert await provider.retrieve_many(
        ["episodic:cas:1", "episodic:cas:gone", "episodic:cas:new"]
    ) == ["changed", None, "x"]
    # no expectation: a plain write
    assert await provider.write_if({}, {"episodic:cas:plain": "p"}, ["episodic:cas:new"]) is True
    assert await provider.retrieve_many(["episodic:cas:plain", "episodic:cas:new"]) == ["p", None]


async def test_write_if_has_exactly_one_winner_among_tasks(provider: MemoryProvider) -> None:
    wins: list[str] = []

    async def claim(me: str) -> None:
        if await provider.write_if(
            {"episodic:claim:id": None}, {"episodic:claim:id": me, f"episodic:claim:by:{me}": "1"}
        ):
            wins.append(me)

    async with anyio.create_task_group() as tg:
        for i in range(50):
            tg.start_soon(claim, f"t{i}")
    assert len(wins) == 1
    assert await provider.retrieve("episodic:claim:id") == wins[0]
    assert await provider.keys("episodic:claim:by:") == [f"episodic:claim:by:{wins[0]}"]


@pytest.mark.slow
async def test_write_if_has_exactly_one_winner_among_processes(store: Store) -> None:
    if not store.shared_across_processes:
        pytest.skip(f"{store.kind} is private to its process")
    procs, keys = 6, 40
    start_at = f"{time.time() + 1.5:.3f}"  # every worker starts claiming at the same moment
    children = [
        subprocess.Popen(
            [
                sys.executable,
                WORKER,
                "claim",
                store.kind,
                store.target,
                start_at,
                str(keys),
                f"p{p}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for p in range(procs)
    ]
    won: dict[int, list[str]] = {i: [] for i in range(keys)}
    for p, child in enumerate(children):
        out, err = await anyio.to_thread.run_sync(child.communicate)
        assert child.returncode == 0, err.decode()[-2000:]
        for line in out.split():
            won[int(line)].append(f"p{p}")
    assert all(len(winners) == 1 for winners in won.values()), won
    async with store.open() as provider:
        stored = await provider.retrieve_many([f"claim:{i}" for i in range(keys)])
    assert stored == [won[i][0] for i in range(keys)]
    assert len({w[0] for w in won.values()}) > 1  # they did race: more than one process won


# --- increment_and_write reading keys -------------------------------------------------------


def _plus_one(seq: int, values: Mapping[str, str | None]) -> tuple[dict[str, str], list[str]]:
    return {
        "episodic:bump:total": str(int(values["episodic:bump:total"] or 0) + 1),
        f"episodic:bump:e:{seq}": "x",
    }, []


async def test_increment_and_write_applies_then_to_the_values_it_read(
    provider: MemoryProvider,
) -> None:
    seen: list[tuple[int, dict[str, str | None]]] = []

    def then(seq: int, values: Mapping[str, str | None]) -> tuple[dict[str, str], list[str]]:
        seen.append((seq, dict(values)))
        return {f"episodic:read:e:{seq}": values["episodic:read:max"] or "none"}, [
            f"episodic:read:e:{seq - 1}"
        ]

    await provider.store("episodic:read:max", "10")
    assert (
        await provider.increment_and_write(
            "episodic:read:seq", then, initial=4, read=["episodic:read:max"]
        )
        == 5
    )
    assert (
        await provider.increment_and_write(
            "episodic:read:seq", then, read=["episodic:read:max", "episodic:read:absent"]
        )
        == 6
    )
    assert seen == [
        (5, {"episodic:read:max": "10"}),
        (6, {"episodic:read:max": "10", "episodic:read:absent": None}),
    ]
    assert await provider.keys("episodic:read:e:") == ["episodic:read:e:6"]
    assert await provider.retrieve_many(["episodic:read:e:6", "episodic:read:seq"]) == ["10", "6"]


async def test_increment_and_write_never_writes_on_stale_reads_under_concurrency(
    provider: MemoryProvider,
) -> None:
    # Every call adds one to a total it read: a write based on a value another task changed
    # in between would lose an update.
    async with anyio.create_task_group() as tg:
        for _ in range(100):
            tg.start_soon(
                lambda: provider.increment_and_write(
                    "episodic:bump:seq", _plus_one, read=["episodic:bump:total"]
                )
            )
    assert await provider.retrieve_many(["episodic:bump:seq", "episodic:bump:total"]) == [
        "100",
        "100",
    ]
    assert len(await provider.keys("episodic:bump:e:")) == 100


@pytest.mark.slow
async def test_increment_and_write_never_writes_on_stale_reads_across_processes(
    store: Store,
) -> None:
    if not store.shared_across_processes:
        pytest.skip(f"{store.kind} is private to its process")
    procs, each = 4, 50
    start_at = f"{time.time() + 1.5:.3f}"
    children = [
        subprocess.Popen(
            [sys.executable, WORKER, "bump", store.kind, store.target, start_at, str(each)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(procs)
    ]
    for child in children:
        _, err = await anyio.to_thread.run_sync(child.communicate)
        assert child.returncode == 0, err.decode()[-2000:]
    async with store.open() as provider:
        total = procs * each
        assert (
            await provider.retrieve_many(["episodic:bump:seq", "episodic:bump:total"])
            == [str(total)] * 2
        )


class Interfering(MemoryProvider):
    """Uses the portable defaults, and changes ``key`` right after the first read of it, as a
    writer in another process would between the default's read and its write."""

    def __init__(self, key: str, value: str) -> None:
        self.inner = InMemoryProvider()
        self.change: tuple[str, str] | None = (key, value)

    async def store(self, key: str, value: str) -> None:
        await self.inner.store(key, value)

    async def retrieve(self, key: str) -> str | None:
        return await self.inner.retrieve(key)

    async def search(self, query: str, top_k: int = 5) -> list[tuple[str, str]]:
        return await self.inner.search(query, top_k)

    async def clear(self) -> None:
        await self.inner.clear()

    async def retrieve_many(self, keys: Sequence[str]) -> list[str | None]:
        values = await self.inner.retrieve_many(keys)
        if self.change is not None and self.change[0] in keys:
            await self.inner.store(*self.change)
            self.change = None
        return values


@pytest.mark.parametrize("wrap", [lambda p: p, as_provider], ids=["subclass", "duck-typed"])
async def test_default_increment_and_write_reruns_then_when_a_read_key_changed(
    wrap: Callable[[MemoryProvider], MemoryProvider],
) -> None:
    interfering = Interfering("ring", "3")
    await interfering.store("ring", "5")
    provider = wrap(interfering)
    assert type(provider).increment_and_write is MemoryProvider.increment_and_write
    calls: list[dict[str, str | None]] = []

    def then(seq: int, values: Mapping[str, str | None]) -> tuple[dict[str, str], list[str]]:
        calls.append(dict(values))
        return {f"e:{seq}": "body", "decided-with": values["ring"] or ""}, []

    assert await provider.increment_and_write("seq", then, read=["ring"]) == 1
    assert calls == [{"ring": "5"}, {"ring": "3"}]  # the stale decision was not applied
    assert await provider.retrieve("decided-with") == "3"
    assert await provider.retrieve("ring") == "3"


# --- keys(prefix) with any character --------------------------------------------------------

NAMESPACES = [
    "support bot",
    "tenant/42",
    "agent:v2",
    "agent",
    "user@example.com",
    "équipe",
    "a*b?[c]{d}",
    "x}y",
    "x",
    "a",
    "a:",
    "a;",
    "a\\b",
    "{a}",
    "}",
    "a\U0001f600",
    "a\U0010ffff",
    "a\uffff",
    "a\x7f",
    "a\u0080",
    "a\ud7ff",
    "a\ue000",
    "\U0010ffff",
    "a b\tc",
    "%_",
    "a\x00b",
]


async def test_keys_returns_exactly_the_keys_that_start_with_the_prefix(
    provider: MemoryProvider,
) -> None:
    written = {
        f"episodic:{ns}:{suffix}": f"value of {ns!r}"
        for ns in NAMESPACES
        for suffix in ("__seq__", "e:1", "e:10")
    }
    written["episodic:a"] = "a key that only looks related"
    written["episodic:"] = "the bare prefix"
    await provider.write(written)
    prefixes = {""}
    for key in written:  # every cut of every key: the namespace prefix and all its neighbours
        prefixes.update(key[:i] for i in range(len("episodic:") - 1, len(key) + 1))
    for prefix in sorted(prefixes):
        expected = sorted(k for k in written if k.startswith(prefix))
        assert await provider.keys(prefix) == expected, prefix
    assert await provider.retrieve_many(list(written)) == list(written.values())
    await provider.delete([f"episodic:{ns}:e:1" for ns in NAMESPACES])
    assert await provider.keys("episodic:a:") == [
        "episodic:a::__seq__",
        "episodic:a::e:10",
        "episodic:a:__seq__",
        "episodic:a:e:10",
    ]


# --- bytes another program left undecodable -------------------------------------------------


async def test_undecodable_stored_bytes_are_read_as_surrogates_and_can_be_deleted(
    store: Store, provider: MemoryProvider
) -> None:
    if not store.holds_bytes:
        pytest.skip(f"{store.kind} holds Python strings, never bytes")
    memory = EpisodicMemory(provider, namespace="raw")
    await memory.record(ep("readable before"))
    await memory.record(ep("readable after"))
    # another program overwrote episode 2, and left a key that is not UTF-8 either
    store.write_raw(b"episodic:raw:e:2", b'{"query": "caf\xe9 \xff", "response": "r"}')
    store.write_raw(b"episodic:raw:x\xe9", b"\xc3(")
    bad_key = "episodic:raw:x\udce9"
    listed = await provider.keys("episodic:raw:")
    assert {"episodic:raw:e:1", "episodic:raw:e:2", bad_key} <= set(listed)
    assert listed == sorted(listed)
    assert await provider.retrieve_many(["episodic:raw:e:2", bad_key]) == [
        '{"query": "caf\udce9 \udcff", "response": "r"}',
        "\udcc3(",
    ]
    assert await provider.search("x\udce9", top_k=10) == [(bad_key, "\udcc3(")]
    # the namespace stays readable: the record is corrupt, skipped and counted
    fresh = EpisodicMemory(provider, namespace="raw")
    assert [e.query for e in await fresh.load()] == ["readable before"]
    assert fresh.counters.corrupt_records == 1
    # a surrogate-holding string passed back names the original bytes
    await provider.write({bad_key: "rewritten \udcff"})
    assert await provider.retrieve(bad_key) == "rewritten \udcff"
    await provider.delete([bad_key, "episodic:raw:e:2"])
    assert bad_key not in await provider.keys("episodic:raw:")
    assert await provider.retrieve_many(["episodic:raw:e:2", bad_key]) == [None, None]
