"""The conformance suite: every guarantee the episode log needs from a provider, as tests.

Each test reads what the provider declares (``shared_across_processes``,
``atomic_increment_and_write``) to decide what to assert; none guesses from a name.
"""

from __future__ import annotations

import json
import random
import re
import signal
import warnings
from collections.abc import AsyncIterator, Collection, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from .. import (
    ConfigurationError,
    CorruptDataError,
    EmbedderMismatchError,
    Episode,
    EpisodicMemory,
    InvalidEpisodeError,
)
from ..providers import MemoryProvider
from ..providers._base import Fresh, Then
from ._embedder import CONCEPT_EPISODES as _CONCEPT_EPISODES
from ._embedder import ConceptEmbedder
from ._store import StoreSpec, worker

__all__ = ["ProviderConformance"]


def _slow(test: Any) -> Any:
    """Mark *test* ``slow`` where the project registers that marker (``-m "not slow"`` skips
    the multi-process tests); leave it unmarked where the marker is unknown."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", pytest.PytestUnknownMarkWarning)
        try:
            return pytest.mark.slow(test)
        except (pytest.fail.Exception, pytest.PytestUnknownMarkWarning):
            return test


def ep(query: str, **fields: Any) -> Episode:
    return Episode(query=query, response=fields.pop("response", "ok"), **fields)


class ProviderConformance:
    """Subclass it in a test module (as ``Test<YourProvider>``) and define the ``store``
    fixture; see :mod:`deepcrew_episodic.testing`.

    Override :meth:`check_after_crashes` to add what only your store can check after the
    SIGKILL test (no temporary files left, say).
    """

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]

    #: How many times the SIGKILL test kills a writer (about 0.3 s each).
    sigkill_rounds: ClassVar[int] = 10

    @pytest.fixture
    def store(self) -> StoreSpec:
        """An empty store. Subclasses override this fixture."""
        pytest.fail(f"{type(self).__name__} must define a `store` fixture returning a Store")

    @pytest.fixture
    async def provider(self, store: StoreSpec) -> AsyncIterator[MemoryProvider]:
        async with store.open() as opened:
            yield opened

    def check_after_crashes(self, store: StoreSpec) -> None:
        """Called after the SIGKILL test's rounds, with the store closed."""

    # --- deepcrew-ai's key/value contract --------------------------------------------------

    async def test_store_retrieve_search_clear(self, provider: MemoryProvider) -> None:
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

    async def test_batch_capabilities(self, provider: MemoryProvider) -> None:
        await provider.write({"p:1": "one", "p:2": "two", "q:1": "other"})
        assert await provider.retrieve_many(["p:2", "nope", "p:1"]) == ["two", None, "one"]
        assert await provider.retrieve_many([]) == []
        assert await provider.keys("p:") == ["p:1", "p:2"]
        await provider.write({"p:3": "three"}, delete=["p:1"])
        assert await provider.retrieve_many(["p:1", "p:3"]) == [None, "three"]
        await provider.delete(["p:2", "absent"])
        assert await provider.keys("p:") == ["p:3"]
        assert await provider.keys("q:") == ["q:1"]
        await provider.delete([])
        await provider.write({})
        assert await provider.keys("") == ["p:3", "q:1"]

    async def test_increment_starts_at_initial_and_is_atomic(
        self, provider: MemoryProvider
    ) -> None:
        assert await provider.increment("n", initial=41) == 42
        assert await provider.increment("n", initial=1000) == 43  # initial only applies once
        results: list[int] = []

        async def bump() -> None:
            results.append(await provider.increment("m"))

        async with anyio.create_task_group() as tg:
            for _ in range(200):
                tg.start_soon(bump)
        assert sorted(results) == list(range(1, 201))

    @pytest.mark.parametrize("raw", ["-1", "\u0663", " 7", "7 ", "1e3", "9" * 19, "abc"])
    async def test_a_counter_that_is_not_ascii_digits_is_corrupt_or_repaired_in_one_step(
        self, provider: MemoryProvider, raw: str
    ) -> None:
        key = "episodic:ctr:__seq__"
        await provider.store(key, raw)
        with pytest.raises(CorruptDataError):
            await provider.increment_and_write(key, lambda s, v: ({"episodic:ctr:e": "x"}, []))
        assert await provider.retrieve_many([key, "episodic:ctr:e"]) == [raw, None]
        assert await provider.increment(key, repair=41) == 42
        assert await provider.increment(key, repair=0) == 43  # repaired once, then counted
        await provider.store(key, "")
        assert await provider.increment(key, initial=9) == 10  # "" counts as absent

    # --- no lost or duplicated episodes ----------------------------------------------------

    @pytest.mark.parametrize("max_episodes", [1000, 100])
    async def test_concurrent_records_in_one_process(
        self, provider: MemoryProvider, max_episodes: int
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
        await _assert_the_newest_are_kept(provider, "conc", 500, min(500, max_episodes))

    @_slow
    @pytest.mark.parametrize("max_episodes", [2000, 150])
    async def test_concurrent_records_from_many_processes(
        self, store: StoreSpec, provider: MemoryProvider, max_episodes: int
    ) -> None:
        _needs_processes(provider)
        await _run_workers(
            [worker(store, "record", "procs", max_episodes, 200, f"w{p}") for p in range(8)]
        )
        async with store.open() as fresh:
            episodes = await EpisodicMemory(
                fresh, namespace="procs", max_episodes=max_episodes
            ).load()
            await _assert_the_newest_are_kept(fresh, "procs", 1600, min(1600, max_episodes))
        assert len(episodes) == min(1600, max_episodes)
        assert len({e.id for e in episodes}) == len(episodes)
        if max_episodes >= 1600:
            expected = {(f"w{p}", i) for p in range(8) for i in range(200)}
            assert {(e.tags[0], int(e.query.split()[3])) for e in episodes} == expected

    @_slow
    async def test_mixed_rings_from_many_processes_lose_nothing(
        self, store: StoreSpec, provider: MemoryProvider
    ) -> None:
        _needs_processes(provider)
        await EpisodicMemory(provider, namespace="mixed", max_episodes=2000).record(ep("first"))
        rings = [2000, 7, 2000, 30]
        await _run_workers(
            [worker(store, "record", "mixed", r, 60, f"w{i}") for i, r in enumerate(rings)]
        )
        async with store.open() as fresh:
            episodes = await EpisodicMemory(fresh, namespace="mixed", max_episodes=2000).load()
        assert len(episodes) == 1 + 60 * len(rings)

    # --- crash safety ----------------------------------------------------------------------

    @_slow
    async def test_sigkill_mid_record_never_leaves_an_unreadable_log(
        self, store: StoreSpec, provider: MemoryProvider
    ) -> None:
        _needs_processes(provider)
        await provider.aclose()
        rng = random.Random(7)
        total_seen = 0
        for round_ in range(self.sigkill_rounds):
            command, env = worker(store, "record", "crash", 40, 0, f"k{round_}", "forever")
            async with await anyio.open_process(command, env=env) as child:
                assert child.stdout is not None
                assert child.stderr is not None
                if await _line(BufferedByteReceiveStream(child.stdout)) != b"ready":
                    err = b"".join([chunk async for chunk in child.stderr])
                    pytest.fail(f"the worker did not start: {err.decode()[-2000:]}")
                await anyio.sleep(rng.uniform(0.005, 0.08))
                child.send_signal(signal.SIGKILL)
                await child.wait()
            async with store.open() as fresh:
                memory = EpisodicMemory(fresh, namespace="crash", max_episodes=40)
                episodes = await memory.load()  # must not raise
                assert memory.counters.corrupt_records == 0
                assert memory.counters.recovered_indexes == 0
                for e in episodes:  # each one whole: a worker's or one of ours
                    assert e.id
                    assert e.timestamp
                    expected = "ok" if e.query.startswith("after kill") else "x" * 300
                    assert e.response == expected
                total_seen = max(total_seen, len(episodes))
                # and the log stays writable
                await memory.record(ep(f"after kill {round_}"))
        assert total_seen > 0
        self.check_after_crashes(store)

    # --- constant round trips --------------------------------------------------------------

    async def test_recall_and_load_cost_constant_round_trips(
        self, provider: MemoryProvider
    ) -> None:
        small = await _calls_for_cold_reads(provider, 5)
        large = await _calls_for_cold_reads(provider, 300)
        assert small == large
        cold, warm, after_write = large
        assert cold == ["retrieve_many", "retrieve_many"]  # index keys, then every live episode
        assert warm == ["retrieve_many"]  # nothing new: the index keys only
        assert after_write == ["retrieve_many", "retrieve_many"]  # index keys, the new episode

    # --- clear ------------------------------------------------------------------------------

    async def test_clear_deletes_every_payload_of_its_namespace_only(
        self, provider: MemoryProvider
    ) -> None:
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
        assert set(remaining) <= {"episodic:a:__seq__", "episodic:a:__gen__", "episodic:a:__base__"}
        for key in remaining:  # only the counter, the change token and the base: no payload
            assert "alpha" not in (await provider.retrieve(key) or "")
        assert await provider.retrieve("unrelated") == "keep me"
        assert await provider.retrieve("episodic:a") == "a key that only looks related"
        assert [e.query for e in await a2.load()] == ["alpha two"]
        assert await provider.keys("episodic:b:") == before_b
        assert [e.query for e in await b.load()] == ["beta"]
        # a cleared log keeps working, and a reader that cached it sees the clear
        await a.record(ep("alpha again"))
        assert [e.query for e in await a.load()] == ["alpha again"]

    async def test_clear_is_seen_by_other_readers(self, provider: MemoryProvider) -> None:
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

    # --- corrupt data ----------------------------------------------------------------------

    async def test_corrupt_episode_is_skipped_counted_and_left_in_place(
        self, provider: MemoryProvider
    ) -> None:
        memory = EpisodicMemory(provider, namespace="bad")
        for i in range(3):
            await memory.record(ep(f"refund order {i}"))
        await _corrupt(provider, "episodic:bad:e:2", '{"query": "half a reco')
        fresh = EpisodicMemory(provider, namespace="bad")
        assert [e.query for e in await fresh.load()] == ["refund order 0", "refund order 2"]
        assert fresh.counters.corrupt_records == 1
        await fresh.recall("refund")  # reported once, not on every read
        assert fresh.counters.corrupt_records == 1
        await fresh.record(ep("refund order 3"))
        assert await provider.retrieve("episodic:bad:e:2") == '{"query": "half a reco'

    async def test_an_undecodable_record_is_skipped_counted_and_can_be_forgotten(
        self, provider: MemoryProvider
    ) -> None:
        memory = EpisodicMemory(provider, namespace="bad")
        for i in range(3):
            await memory.record(ep(f"refund order {i}"))
        # A lone surrogate is what a provider returns for bytes that are not UTF-8.
        await _corrupt(provider, "episodic:bad:e:2", '{"query": "broken \udcff"}')
        fresh = EpisodicMemory(provider, namespace="bad")
        assert [e.query for e in await fresh.load()] == ["refund order 0", "refund order 2"]
        assert fresh.counters.corrupt_records == 1
        assert (await fresh.stats()).corrupt == 1
        assert len(await fresh.recall("refund order")) == 2
        assert await fresh.forget(corrupt=True) == 1
        assert await provider.retrieve("episodic:bad:e:2") is None
        assert (await EpisodicMemory(provider, namespace="bad").stats()).corrupt == 0

    async def test_corrupt_counter_loses_no_episode(self, provider: MemoryProvider) -> None:
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

    @pytest.mark.parametrize(
        ("key", "value"),
        [
            ("__meta__", '{"count": 1e400, "next": 0}'),
            ("__meta__", '{"count": 99999999999999999999999, "next": 0}'),
            ("__meta__", '{"count": true, "next": 0}'),
            ("__meta__", '{"count": "٣", "next": 0}'),
            ("__meta__", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["),
            ("__max__", "²"),
            ("__max__", "-5"),
            ("__max__", "1e9"),
            ("__seq__", "٣"),
            ("__seq__", "1e400"),
            ("__seq__", "-1"),
            ("__seq__", "99999999999999999999999999"),
        ],
    )
    async def test_a_corrupt_index_key_is_rebuilt_on_every_path(
        self, provider: MemoryProvider, key: str, value: str
    ) -> None:
        memory = EpisodicMemory(provider, namespace="idx", max_episodes=10)
        for i in range(3):
            await memory.record(ep(f"refund order {i}"))
        await provider.store(f"episodic:idx:{key}", value)
        fresh = EpisodicMemory(provider, namespace="idx", max_episodes=10)
        assert len(await fresh.load()) == 3
        assert len(await fresh.recall("refund order")) == 3
        await fresh.record(ep("refund order 3"))
        assert len(await EpisodicMemory(provider, namespace="idx", max_episodes=10).load()) == 4
        await fresh.sweep()
        assert await fresh.forget(containing="order 0") == 1
        assert len(await EpisodicMemory(provider, namespace="idx", max_episodes=10).load()) == 3

    async def test_corrupt_legacy_index_loses_no_episode(self, provider: MemoryProvider) -> None:
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

    async def test_undecodable_stored_bytes_are_read_as_surrogates_and_can_be_deleted(
        self, store: StoreSpec, provider: MemoryProvider
    ) -> None:
        memory = EpisodicMemory(provider, namespace="raw")
        await memory.record(ep("readable before"))
        await memory.record(ep("readable after"))
        # another program overwrote episode 2, and left a key that is not UTF-8 either
        try:
            store.write_raw(b"episodic:raw:e:2", b'{"query": "caf\xe9 \xff", "response": "r"}')
        except NotImplementedError:
            pytest.skip("the store holds no bytes that another program could leave undecodable")
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

    # --- namespaces --------------------------------------------------------------------------

    @pytest.mark.parametrize(
        "namespace",
        ["", "ns\n", "a\x1bb", "a\u200bb", "a\u202eb", "a\ud800", "x" * 257, None, 42],
    )
    async def test_bad_namespace_raises_value_error(
        self, provider: MemoryProvider, namespace: Any
    ) -> None:
        with pytest.raises(ValueError, match="namespace"):
            EpisodicMemory(provider, namespace=namespace)
        with pytest.raises(ConfigurationError):
            EpisodicMemory(provider, namespace=namespace)

    async def test_namespaces_are_isolated(self, provider: MemoryProvider) -> None:
        a = EpisodicMemory(provider, namespace="team-a")
        b = EpisodicMemory(provider, namespace="team-b")
        await a.record(ep("rotate the api key"))
        assert await b.recall("rotate the api key") == []
        assert await b.load() == []

    async def test_any_printable_namespace_works_and_stays_isolated(
        self, provider: MemoryProvider
    ) -> None:
        plain = EpisodicMemory(provider, namespace="a")
        await plain.record(ep("in a"))
        names = [*PRINTABLE_NAMESPACES, "a:b", "a:e"]
        memories = {ns: EpisodicMemory(provider, namespace=ns) for ns in names}
        for ns, memory in memories.items():
            await memory.record(ep(f"in {ns}"))
        for ns, memory in memories.items():
            assert [e.query for e in await memory.load()] == [f"in {ns}"]
        await plain.clear()
        assert await plain.load() == []
        for ns in memories:
            fresh = EpisodicMemory(provider, namespace=ns)
            assert [e.query for e in await fresh.load()] == [f"in {ns}"], ns
            await fresh.clear()
            assert await EpisodicMemory(provider, namespace=ns).load() == []
        # clearing one left every other alone until its own turn came
        assert await EpisodicMemory(provider, namespace="a").load() == []

    async def test_a_deepcrew_log_under_any_namespace_is_read_in_place(
        self, provider: MemoryProvider
    ) -> None:
        for ns in ("support bot", "tenant/42", "agent:v2"):
            raw = f"episodic:{ns}:"
            await provider.write(
                {
                    raw + "__meta__": json.dumps({"count": 2, "next": 0}),
                    raw + "0": json.dumps({"query": f"old one {ns}", "outcome": "success"}),
                    raw + "1": json.dumps({"query": f"old two {ns}", "outcome": "failure"}),
                }
            )
            memory = EpisodicMemory(provider, namespace=ns)
            assert [e.query for e in await memory.load()] == [f"old one {ns}", f"old two {ns}"]
            await memory.record(ep(f"new {ns}"))
            assert len(await EpisodicMemory(provider, namespace=ns).load()) == 3
        # the deepcrew log named "agent:v2" is not a part of "agent"
        assert await EpisodicMemory(provider, namespace="agent").load() == []
        await EpisodicMemory(provider, namespace="agent").clear()
        assert len(await EpisodicMemory(provider, namespace="agent:v2").load()) == 3

    async def test_the_one_ambiguous_layout_is_refused(self, provider: MemoryProvider) -> None:
        """deepcrew-ai's slots of a log named "x:e" are spelt like our entries of "x"."""
        await EpisodicMemory(provider, namespace="x").record(ep("ours"))
        await provider.write({"episodic:x:e:__meta__": json.dumps({"count": 1, "next": 0})})
        with pytest.raises(ConfigurationError, match="overlap"):
            await EpisodicMemory(provider, namespace="x").load()
        with pytest.raises(ConfigurationError, match="overlap"):
            await EpisodicMemory(provider, namespace="x:e").load()

    # --- bad input -----------------------------------------------------------------------------

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
        self, provider: MemoryProvider, fields: dict[str, Any], named: str
    ) -> None:
        memory = EpisodicMemory(provider, namespace="val")
        await memory.record(ep("kept"))
        before = await provider.keys("")
        with pytest.raises(InvalidEpisodeError, match=named.replace(".", r"\.")):
            Episode(query="q", **fields)
        with pytest.raises(InvalidEpisodeError, match=named.replace(".", r"\.")):
            await memory.record({"query": "q", "response": "r", **fields})
        assert await provider.keys("") == before
        assert [e.query for e in await memory.load()] == ["kept"]

    async def test_an_id_holding_a_secret_is_refused(self, provider: MemoryProvider) -> None:
        memory = EpisodicMemory(provider, namespace="secret-id")
        with pytest.raises(InvalidEpisodeError, match="secret"):
            await memory.record(ep("q", id="AKIAIOSFODNN7EXAMPLE"))
        assert await memory.load() == []
        assert await provider.keys("") == []

    # --- the ring -------------------------------------------------------------------------------

    async def test_ring_keeps_the_newest_and_reopening_with_another_size_keeps_them(
        self, provider: MemoryProvider
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

    async def test_a_smaller_ring_never_deletes_what_a_larger_ring_shows(
        self, provider: MemoryProvider
    ) -> None:
        big = EpisodicMemory(provider, namespace="ring", max_episodes=80)
        small = EpisodicMemory(provider, namespace="ring", max_episodes=10)
        for i in range(50):
            await big.record(ep(f"big task {i}"))
        shown = await small.load()
        assert len(shown) == 10  # a memory shows its own ring's worth

        assert await small.forget([shown[0].id]) == 1
        assert len(await big.load()) == 49
        assert await small.sweep() == 0
        assert len(await big.load()) == 49
        # forget and sweep act on the whole log, not only on what the smaller memory shows
        assert await small.forget(containing="big task 3") == 11  # 3 and 30..39
        assert len(await big.load()) == 38
        for i in range(20):  # appends by the small ring evict by the log's ring, not its own
            await small.record(ep(f"small task {i}"))
        assert len(await big.load()) == 58
        assert len(await small.load()) == 10
        # a fresh memory of any size sees the same log
        fresh = EpisodicMemory(provider, namespace="ring", max_episodes=1000)
        assert len(await fresh.load()) == 58

    async def test_a_smaller_ring_never_deletes_a_deepcrew_logs_episodes(
        self, provider: MemoryProvider
    ) -> None:
        """deepcrew-ai keeps no ring size: its slot count stands for it."""
        items = {"episodic:dc:__meta__": json.dumps({"count": 10, "next": 0})}
        items.update({f"episodic:dc:{i}": json.dumps({"query": f"old {i}"}) for i in range(10)})
        await provider.write(items)
        small = EpisodicMemory(provider, namespace="dc", max_episodes=3)
        assert await small.sweep() == 0
        await small.record(ep("new"))
        big = EpisodicMemory(provider, namespace="dc", max_episodes=10)
        assert [e.query for e in await big.load()] == [*(f"old {i}" for i in range(1, 10)), "new"]

    @pytest.mark.parametrize("damage", ["garbage", "0", "", " 10", "-5", None])
    async def test_a_damaged_ring_size_is_rebuilt_not_taken_for_a_small_one(
        self, provider: MemoryProvider, damage: str | None
    ) -> None:
        big = EpisodicMemory(provider, namespace="dmg", max_episodes=10)
        for i in range(10):
            await big.record(ep(f"task {i}"))
        if damage is None:
            await provider.delete(["episodic:dmg:__max__"])
        else:
            await provider.write({"episodic:dmg:__max__": damage})
        small = EpisodicMemory(provider, namespace="dmg", max_episodes=3)
        assert await small.sweep() == 0
        await small.record(ep("small"))
        assert small.counters.recovered_indexes >= 1
        fresh = EpisodicMemory(provider, namespace="dmg", max_episodes=10)
        assert [e.query for e in await fresh.load()] == [
            *(f"task {i}" for i in range(1, 10)),
            "small",
        ]
        assert await provider.retrieve_many(["episodic:dmg:__max__"]) == ["10"]

    @pytest.mark.parametrize("lowered", ["1", "3"])
    async def test_a_ring_size_lowered_by_hand_deletes_nothing_the_records_keep(
        self, provider: MemoryProvider, lowered: str
    ) -> None:
        if not provider.atomic_increment_and_write:
            pytest.skip(
                "where the counter is raised in a step of its own, an append cannot tell an "
                "episode kept by a larger ring from one whose eviction is still in flight"
            )
        big = EpisodicMemory(provider, namespace="low", max_episodes=10)
        for i in range(10):
            await big.record(ep(f"task {i}"))
        await provider.write({"episodic:low:__max__": lowered})
        small = EpisodicMemory(provider, namespace="low", max_episodes=2)
        await small.record(ep("small 0"))
        await small.record(ep("small 1"))
        assert small.counters.recovered_indexes >= 1
        # The records kept ten: the ring is ten again, and only what a ring of ten lets fall
        # out (the two oldest, as two more were recorded) is gone.
        assert await provider.retrieve_many(["episodic:low:__max__"]) == ["10"]
        kept = [*(f"task {i}" for i in range(2, 10)), "small 0", "small 1"]
        fresh = EpisodicMemory(provider, namespace="low", max_episodes=10)
        assert [e.query for e in await fresh.load()] == kept
        assert [e.query for e in await small.load()] == kept[-2:]
        stored = await provider.keys("episodic:low:e:")
        assert sorted(int(k.rpartition(":")[2]) for k in stored) == list(range(3, 13))
        # Rebuilt once: the next records evict by the ring of ten, and find nothing to repair.
        repairs = small.counters.recovered_indexes
        for i in range(2, 5):
            await small.record(ep(f"small {i}"))
        assert small.counters.recovered_indexes == repairs
        assert await provider.retrieve_many(["episodic:low:__max__"]) == ["10"]
        stored = await provider.keys("episodic:low:e:")
        assert sorted(int(k.rpartition(":")[2]) for k in stored) == list(range(6, 16))

    async def test_a_ring_lowered_by_hand_is_rebuilt_across_forgotten_episodes(
        self, provider: MemoryProvider
    ) -> None:
        if not provider.atomic_increment_and_write:
            pytest.skip("see test_a_ring_size_lowered_by_hand_deletes_nothing_the_records_keep")
        big = EpisodicMemory(provider, namespace="lowgap", max_episodes=10)
        for i in range(10):
            await big.record(ep(f"task {i}", id=f"run-{i}"))
        await big.forget(["run-4", "run-5"])
        await provider.write({"episodic:lowgap:__max__": "2"})
        small = EpisodicMemory(provider, namespace="lowgap", max_episodes=2)
        await small.record(ep("small"))
        assert await provider.retrieve_many(["episodic:lowgap:__max__"]) == ["10"]
        fresh = EpisodicMemory(provider, namespace="lowgap", max_episodes=10)
        assert [e.query for e in await fresh.load()] == [
            *(f"task {i}" for i in (1, 2, 3, 6, 7, 8, 9)),
            "small",
        ]

    @pytest.mark.parametrize("damage", ["", "0", None])
    async def test_a_counter_behind_the_stored_episodes_is_moved_past_them(
        self, provider: MemoryProvider, damage: str | None
    ) -> None:
        memory = EpisodicMemory(provider, namespace="seq")
        for i in range(5):
            await memory.record(ep(f"task {i}"))
        if damage is None:
            await provider.delete(["episodic:seq:__seq__"])
        else:
            await provider.write({"episodic:seq:__seq__": damage})
        fresh = EpisodicMemory(provider, namespace="seq")
        assert len(await fresh.load()) == 5
        await fresh.record(ep("task 5"))  # never overwrites e:1
        again = EpisodicMemory(provider, namespace="seq")
        assert [e.query for e in await again.load()] == [f"task {i}" for i in range(6)]

    async def test_an_explicit_id_kept_beyond_a_smaller_view_is_never_stored_twice(
        self, provider: MemoryProvider
    ) -> None:
        big = EpisodicMemory(provider, namespace="idview", max_episodes=10)
        await big.record(ep("first", id="run-5"))
        # an episode written without a claim (deepcrew-ai, or this library's 0.1)
        await provider.delete([big._log.claim_key("run-5")])
        for i in range(5):
            await big.record(ep(f"filler {i}"))
        small = EpisodicMemory(provider, namespace="idview", max_episodes=3)
        with pytest.raises(InvalidEpisodeError, match="already stored"):
            await small.record(ep("again", id="run-5"))
        assert [e.id for e in await big.load()].count("run-5") == 1

    async def test_a_namespace_ending_in_e_never_touches_the_one_before_it(
        self, provider: MemoryProvider
    ) -> None:
        """Without a deepcrew-ai index, "episodic:a:e:<n>" are episodes of "a", not slots of
        a deepcrew-ai log named "a:e"."""
        a = EpisodicMemory(provider, namespace="a")
        for i in range(3):
            await a.record(ep(f"in a {i}"))
        ae = EpisodicMemory(provider, namespace="a:e")
        await ae.record(ep("in a:e"))
        assert await ae.forget(containing="in a") == 1  # its own "in a:e" only
        assert await ae.sweep() == 0
        await ae.clear()
        assert [e.query for e in await EpisodicMemory(provider, namespace="a").load()] == [
            f"in a {i}" for i in range(3)
        ]

    async def test_a_record_nested_too_deeply_is_skipped_not_fatal(
        self, provider: MemoryProvider
    ) -> None:
        memory = EpisodicMemory(provider, namespace="deep")
        for i in range(3):
            await memory.record(ep(f"refund order {i}"))
        await _corrupt(provider, "episodic:deep:e:2", "[" * 100_000 + "]" * 100_000)
        fresh = EpisodicMemory(provider, namespace="deep")
        assert len(await fresh.load()) == 2
        assert len(await fresh.recall("refund order")) == 2
        assert (await fresh.stats()).corrupt == 1
        assert await fresh.forget(corrupt=True) == 1

    async def test_shrink_is_the_one_way_to_lower_the_ring(self, provider: MemoryProvider) -> None:
        big = EpisodicMemory(provider, namespace="shrink", max_episodes=50)
        for i in range(30):
            await big.record(ep(f"task {i}"))
        other = EpisodicMemory(provider, namespace="shrink", max_episodes=5)
        assert await other.shrink(12) == 18
        assert other.max_episodes == 12
        assert [e.query for e in await big.load()] == [f"task {i}" for i in range(18, 30)]
        assert len(await provider.keys("episodic:shrink:e:")) == 12
        # the ring stays at 12 for a smaller writer
        for i in range(5):
            await other.record(ep(f"more {i}"))
        assert len(await big.load()) == 12
        with pytest.raises(ConfigurationError):
            await other.shrink(0)

    async def test_a_larger_ring_grows_the_log_for_every_writer(
        self, provider: MemoryProvider
    ) -> None:
        small = EpisodicMemory(provider, namespace="grow", max_episodes=5)
        for i in range(8):
            await small.record(ep(f"a {i}"))
        big = EpisodicMemory(provider, namespace="grow", max_episodes=20)
        assert len(await big.load()) == 5  # what the small ring kept
        await big.record(ep("big"))
        for i in range(10):
            await small.record(ep(f"b {i}"))
        assert len(await big.load()) == 16  # 5 + 1 + 10: the small writer evicts by 20 now

    async def test_record_fills_id_and_timestamp_and_round_trips(
        self, provider: MemoryProvider
    ) -> None:
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
        # deepcrew-ai fills these in on the caller's object too; the rest is left as given
        assert (original.id, original.timestamp) == (stored.id, stored.timestamp)
        (loaded,) = await EpisodicMemory(provider, namespace="rt").load()
        assert loaded == stored

    async def test_unknown_fields_from_a_newer_writer_decode(
        self, provider: MemoryProvider
    ) -> None:
        memory = EpisodicMemory(provider, namespace="newer")
        await memory.record(ep("first"))
        body = {"query": "from the future", "response": "r", "outcome": "success", "x": 0.4}
        await provider.write({"episodic:newer:e:2": json.dumps(body)})
        await provider.store("episodic:newer:__seq__", "2")
        loaded = await EpisodicMemory(provider, namespace="newer").load()
        assert [e.query for e in loaded] == ["first", "from the future"]
        assert loaded[1].outcome == "success"

    # --- explicit ids ------------------------------------------------------------------------

    async def test_an_explicit_id_is_stored_once_under_concurrency(
        self, provider: MemoryProvider
    ) -> None:
        outcomes: list[str] = []

        async def one(i: int) -> None:
            memory = EpisodicMemory(provider, namespace="ids")  # each its own cache
            try:
                await memory.record(ep(f"attempt {i}", id="same"))
                outcomes.append("stored")
            except InvalidEpisodeError:
                outcomes.append("refused")

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(one, i)
        assert sorted(outcomes) == ["refused"] * 7 + ["stored"]
        stored = await EpisodicMemory(provider, namespace="ids").load()
        assert [e.id for e in stored] == ["same"]

    async def test_an_explicit_id_can_be_recorded_again_once_forgotten(
        self, provider: MemoryProvider
    ) -> None:
        memory = EpisodicMemory(provider, namespace="ids2", max_episodes=3)
        await memory.record(ep("first", id="run-1"))
        with pytest.raises(InvalidEpisodeError, match="already stored"):
            await EpisodicMemory(provider, namespace="ids2", max_episodes=3).record(
                ep("again", id="run-1")
            )
        assert await memory.forget("run-1") == 1
        await memory.record(ep("second", id="run-1"))
        assert [e.query for e in await memory.load()] == ["second"]
        for i in range(3):  # evicted by the ring: the id is free again
            await memory.record(ep(f"filler {i}"))
        await memory.record(ep("third", id="run-1"))
        assert [e.query for e in await memory.load() if e.id == "run-1"] == ["third"]
        # sweep removes claims whose episode is gone, and never a live one
        await memory.sweep()
        with pytest.raises(InvalidEpisodeError, match="already stored"):
            await memory.record(ep("fourth", id="run-1"))

    # --- compare-and-set (write_if) -----------------------------------------------------------

    async def test_write_if_sets_only_when_every_expected_value_holds(
        self, provider: MemoryProvider
    ) -> None:
        p = provider
        # None: absent, or ""
        assert await p.write_if({"episodic:cas:a": None}, {"episodic:cas:a": "first"}) is True
        assert await p.write_if({"episodic:cas:a": None}, {"episodic:cas:a": "second"}) is False
        assert await p.retrieve("episodic:cas:a") == "first"
        await p.store("episodic:cas:empty", "")
        assert await p.write_if({"episodic:cas:empty": None}, {"episodic:cas:empty": "taken"})
        assert await p.retrieve("episodic:cas:empty") == "taken"
        # "" expects "" exactly, not an absent key
        assert not await p.write_if({"episodic:cas:absent": ""}, {"episodic:cas:absent": "x"})
        assert await p.retrieve("episodic:cas:absent") is None
        await p.store("episodic:cas:blank", "")
        assert await p.write_if({"episodic:cas:blank": ""}, {"episodic:cas:blank": "x"}) is True

        # several keys: one mismatch changes nothing at all (no store, no delete)
        await p.write(
            {"episodic:cas:1": "one", "episodic:cas:2": "two", "episodic:cas:gone": "doomed"}
        )
        before = await p.keys("episodic:cas:")
        assert not await p.write_if(
            {"episodic:cas:1": "one", "episodic:cas:2": "TWO", "episodic:cas:3": None},
            {"episodic:cas:new": "x", "episodic:cas:1": "changed"},
            ["episodic:cas:gone"],
        )
        assert await p.keys("episodic:cas:") == before
        assert await p.retrieve_many(
            ["episodic:cas:1", "episodic:cas:gone", "episodic:cas:new"]
        ) == ["one", "doomed", None]
        # all match: items stored, deletes done, and an item named in delete is stored
        assert await p.write_if(
            {"episodic:cas:1": "one", "episodic:cas:2": "two", "episodic:cas:3": None},
            {"episodic:cas:new": "x", "episodic:cas:1": "changed"},
            ["episodic:cas:gone", "episodic:cas:1", "episodic:cas:never-was"],
        )
        assert await p.retrieve_many(
            ["episodic:cas:1", "episodic:cas:gone", "episodic:cas:new"]
        ) == ["changed", None, "x"]
        # no expectation: a plain write
        assert await p.write_if({}, {"episodic:cas:plain": "p"}, ["episodic:cas:new"]) is True
        assert await p.retrieve_many(["episodic:cas:plain", "episodic:cas:new"]) == ["p", None]

    async def test_write_if_has_exactly_one_winner_among_tasks(
        self, provider: MemoryProvider
    ) -> None:
        wins: list[str] = []

        async def claim(me: str) -> None:
            if await provider.write_if(
                {"episodic:claim:id": None},
                {"episodic:claim:id": me, f"episodic:claim:by:{me}": "1"},
            ):
                wins.append(me)

        async with anyio.create_task_group() as tg:
            for i in range(50):
                tg.start_soon(claim, f"t{i}")
        assert len(wins) == 1
        assert await provider.retrieve("episodic:claim:id") == wins[0]
        assert await provider.keys("episodic:claim:by:") == [f"episodic:claim:by:{wins[0]}"]

    @_slow
    async def test_write_if_has_exactly_one_winner_among_processes(
        self, store: StoreSpec, provider: MemoryProvider
    ) -> None:
        _needs_processes(provider)
        procs, keys = 6, 40
        # Every worker connects, then all start claiming at once. Half go up the keys and half
        # down: several processes race for every key, and more than one wins some.
        outputs = await _run_workers(
            [
                worker(store, "claim", keys, f"p{p}", "up" if p % 2 else "down")
                for p in range(procs)
            ],
            together=True,
        )
        won: dict[int, list[str]] = {i: [] for i in range(keys)}
        for p, out in enumerate(outputs):
            for line in out.split():
                won[int(line)].append(f"p{p}")
        assert all(len(winners) == 1 for winners in won.values()), won
        stored = await provider.retrieve_many([f"claim:{i}" for i in range(keys)])
        assert stored == [won[i][0] for i in range(keys)]
        assert len({w[0] for w in won.values()}) > 1  # they did race: several processes won

    # --- increment_and_write reading keys ---------------------------------------------------

    async def test_increment_and_write_applies_then_to_the_values_it_read(
        self, provider: MemoryProvider
    ) -> None:
        seen: list[tuple[int, dict[str, str | None]]] = []

        def then(seq: int, values: Mapping[str, str | None]) -> tuple[dict[str, str], list[str]]:
            seen.append((seq, dict(values)))
            return {f"episodic:read:e:{seq}": values["episodic:read:max"] or "none"}, [
                f"episodic:read:e:{seq - 1}"
            ]

        await provider.store("episodic:read:max", "10")
        read = ["episodic:read:max"]
        assert (
            await provider.increment_and_write("episodic:read:seq", then, initial=4, read=read) == 5
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
        assert await provider.retrieve_many(["episodic:read:e:6", "episodic:read:seq"]) == [
            "10",
            "6",
        ]

    async def test_increment_and_write_never_writes_on_stale_reads_under_concurrency(
        self, provider: MemoryProvider
    ) -> None:
        # Every call adds one to a total it read: a write based on a value another task
        # changed in between would lose an update.
        async with anyio.create_task_group() as tg:
            for _ in range(100):
                tg.start_soon(_bump, provider)
        assert await provider.retrieve_many(["episodic:bump:seq", "episodic:bump:total"]) == [
            "100",
            "100",
        ]
        assert len(await provider.keys("episodic:bump:e:")) == 100

    @_slow
    async def test_increment_and_write_never_writes_on_stale_reads_across_processes(
        self, store: StoreSpec, provider: MemoryProvider
    ) -> None:
        _needs_processes(provider)
        procs, each = 4, 50
        await _run_workers([worker(store, "bump", each) for _ in range(procs)], together=True)
        total = str(procs * each)
        assert await provider.retrieve_many(["episodic:bump:seq", "episodic:bump:total"]) == [
            total,
            total,
        ]

    async def test_increment_and_write_reads_the_keys_the_new_value_names(
        self, provider: MemoryProvider
    ) -> None:
        """``fresh(value)`` names the record a new counter value would write: ``then`` sees it
        as stored, so a counter that fell behind its records can never overwrite one."""
        seen: list[tuple[int, dict[str, str | None]]] = []

        class Taken(Exception):
            pass

        def then(seq: int, values: Mapping[str, str | None]) -> tuple[dict[str, str], list[str]]:
            seen.append((seq, dict(values)))
            if values[f"episodic:fr:e:{seq}"]:
                raise Taken(seq)
            return {f"episodic:fr:e:{seq}": "new"}, []

        def fresh(seq: int) -> list[str]:
            return [f"episodic:fr:e:{seq}"]

        await provider.write({"episodic:fr:seq": "2", "episodic:fr:e:3": "stored"})
        with pytest.raises(Taken):
            await provider.increment_and_write("episodic:fr:seq", then, fresh=fresh)
        assert seen[-1] == (3, {"episodic:fr:e:3": "stored"})
        assert await provider.retrieve_many(["episodic:fr:e:3"]) == ["stored"]
        assert await provider.keys("episodic:fr:e:") == ["episodic:fr:e:3"]
        await provider.write({"episodic:fr:seq": "3"})
        read = ["episodic:fr:max"]
        assert (
            await provider.increment_and_write("episodic:fr:seq", then, read=read, fresh=fresh) == 4
        )
        assert seen[-1] == (4, {"episodic:fr:max": None, "episodic:fr:e:4": None})
        assert await provider.retrieve_many(["episodic:fr:e:3", "episodic:fr:e:4"]) == [
            "stored",
            "new",
        ]

    async def test_a_reader_that_stays_up_follows_every_use(self, provider: MemoryProvider) -> None:
        """Use counts are read by the episodes a use names (a journal beside ``__uses__``),
        and all of them when an entry is missing (a writer between its steps, an older one)."""
        writer = EpisodicMemory(provider, namespace="usej")
        ids = [(await writer.record(ep(f"restart pool {i}"))).id for i in range(4)]
        reader = EpisodicMemory(provider, namespace="usej")
        await reader.load()
        await writer.used([ids[0], ids[1]])
        await writer.used(ids[1])
        assert dict((await reader.stats()).most_used) == {ids[0]: 1, ids[1]: 2}
        await writer.used(ids[2])
        await provider.delete(await provider.keys("episodic:usej:uj:"))  # the journal lost
        await writer.used(ids[3])
        assert dict((await reader.stats()).most_used) == {
            ids[0]: 1,
            ids[1]: 2,
            ids[2]: 1,
            ids[3]: 1,
        }
        await writer.used(ids[0])
        assert dict((await reader.stats()).most_used)[ids[0]] == 2
        fresh = EpisodicMemory(provider, namespace="usej")
        assert (await fresh.stats()).most_used == (await reader.stats()).most_used

    # --- counters never trusted over their records -------------------------------------------

    @pytest.mark.parametrize(
        "state",
        [
            "missing",
            "evicted",
            "zero",
            "behind",
            "garbled",
            "at its limit",
            "past any count",
            "a ring ahead",
            "far ahead",
        ],
    )
    async def test_no_episode_counter_state_overwrites_or_hides_an_episode(
        self, provider: MemoryProvider, state: str
    ) -> None:
        """Whatever the counter holds (evicted by a cache policy, restored from an older
        backup, edited by hand, near 10**18, a whole ring or more past the newest episode),
        every stored episode stays visible, no sweep or shrink takes one for a leftover, and
        the next records go after them."""
        writer = EpisodicMemory(provider, namespace="cnt", max_episodes=10)
        for i in range(6):
            await writer.record(ep(f"task {i}"))
        reader = EpisodicMemory(provider, namespace="cnt", max_episodes=10)
        assert len(await reader.load()) == 6
        keys = await provider.keys("episodic:cnt:e:")
        before = dict(zip(keys, await provider.retrieve_many(keys), strict=True))
        await _damage_counter(provider, "episodic:cnt:__seq__", state)
        if state == "evicted":  # everything but the episodes, as allkeys-random can leave it
            await provider.delete(["episodic:cnt:__gen__", "episodic:cnt:__max__"])
        expected = [f"task {i}" for i in range(6)]
        assert [e.query for e in await EpisodicMemory(provider, namespace="cnt").load()] == expected
        assert [e.query for e in await reader.load()] == expected
        small = EpisodicMemory(provider, namespace="cnt", max_episodes=4)
        assert [e.query for e in await small.load()] == expected[-4:]
        assert await EpisodicMemory(provider, namespace="cnt", max_episodes=10).sweep() == 0
        assert await EpisodicMemory(provider, namespace="cnt", max_episodes=20).shrink(10) == 0
        assert await provider.retrieve_many(list(before)) == list(before.values())
        late = EpisodicMemory(provider, namespace="cnt", max_episodes=10)
        for i in range(3):
            await late.record(ep(f"new {i}"))
        expected += [f"new {i}" for i in range(3)]
        assert await provider.retrieve_many(list(before)) == list(before.values())
        for memory in (EpisodicMemory(provider, namespace="cnt"), reader, writer, late):
            assert [e.query for e in await memory.load()] == expected
            assert len(await memory.recall("task new", top_k=20)) == 9
            assert (await memory.stats()).total == 9

    async def test_a_log_that_lost_its_whole_index_and_its_ends_shows_what_is_left(
        self, provider: MemoryProvider
    ) -> None:
        """A cache policy (Redis allkeys-*) evicted the counter, the change token, the ring
        size, the base and the first and newest episodes: what is left reads as a new log,
        yet every remaining episode is shown, to a fresh reader and to the writer that never
        read, and the next records go after them."""
        writer = EpisodicMemory(provider, namespace="lost", max_episodes=10)
        for i in range(6):
            await writer.record(ep(f"task {i}"))
        index = ["__seq__", "__gen__", "__max__", "__base__"]
        await provider.delete([f"episodic:lost:{k}" for k in index] + ["episodic:lost:e:1"])
        await provider.delete(["episodic:lost:e:6"])
        left = [f"task {i}" for i in range(1, 5)]
        for memory in (EpisodicMemory(provider, namespace="lost"), writer):
            assert [e.query for e in await memory.load()] == left
        await EpisodicMemory(provider, namespace="lost", max_episodes=10).record(ep("new 0"))
        for memory in (EpisodicMemory(provider, namespace="lost"), writer):
            assert [e.query for e in await memory.load()] == [*left, "new 0"]

    async def test_a_writer_that_lost_the_whole_index_still_shows_its_episodes(
        self, provider: MemoryProvider
    ) -> None:
        """Every index key evicted, and the oldest episode with them (allkeys-lru can leave
        that): the memory that wrote the log, which never read it, still shows what is left,
        and the next record goes after it."""
        writer = EpisodicMemory(provider, namespace="lost", max_episodes=50)
        for i in range(10):
            await writer.record(ep(f"task {i}"))
        index = ["__seq__", "__gen__", "__max__", "__base__", "e:1"]
        await provider.delete([f"episodic:lost:{k}" for k in index])
        expected = [f"task {i}" for i in range(1, 10)]
        assert [e.query for e in await writer.load()] == expected
        await EpisodicMemory(provider, namespace="lost", max_episodes=50).record(ep("task 10"))
        for memory in (writer, EpisodicMemory(provider, namespace="lost")):
            assert [e.query for e in await memory.load()] == [*expected, "task 10"]

    @pytest.mark.parametrize("state", ["a ring ahead", "far ahead"])
    async def test_a_writer_that_stays_up_never_records_past_a_counter_moved_ahead(
        self, provider: MemoryProvider, state: str
    ) -> None:
        """The counter moved a whole ring or more past the episodes stored under a writer that
        has recorded before and never reads: its next record goes just after them, and no
        episode falls out of view or is swept as a leftover."""
        writer = EpisodicMemory(provider, namespace="ahead", max_episodes=10)
        for i in range(6):
            await writer.record(ep(f"task {i}"))
        await _damage_counter(provider, "episodic:ahead:__seq__", state)
        if not provider.atomic_increment_and_write:
            # Where the counter is raised in a step of its own, a writer cannot refuse the
            # number it took without leaving a hole: it finds the counter by reading (as a
            # writer that recalls before each run does), and its next record lowers it.
            assert len(await writer.load()) == 6
        await writer.record(ep("task 6"))
        await writer.record(ep("task 7"))
        expected = [f"task {i}" for i in range(8)]
        assert await EpisodicMemory(provider, namespace="ahead", max_episodes=10).sweep() == 0
        for memory in (writer, EpisodicMemory(provider, namespace="ahead", max_episodes=10)):
            assert [e.query for e in await memory.load()] == expected
        assert await provider.retrieve_many(["episodic:ahead:__seq__"]) == ["8"]

    @pytest.mark.parametrize(
        "state",
        ["missing", "zero", "behind", "garbled", "at its limit", "past any count", "far ahead"],
    )
    async def test_no_grade_counter_state_overwrites_or_hides_a_grade(
        self, provider: MemoryProvider, state: str
    ) -> None:
        writer = EpisodicMemory(provider, namespace="gcnt")
        first = await writer.record(ep("rotate the keys", outcome="failure"))
        second = await writer.record(ep("renew the cert", outcome="failure"))
        await writer.grade(first.id, outcome="partial")
        await writer.grade(first.id, outcome="success")
        await writer.grade(second.id, outcome="success")
        reader = EpisodicMemory(provider, namespace="gcnt")
        assert [e.outcome for e in await reader.load()] == ["success", "success"]
        keys = await provider.keys("episodic:gcnt:g:")
        before = dict(zip(keys, await provider.retrieve_many(keys), strict=True))
        await _damage_counter(provider, "episodic:gcnt:__grades__", state)
        for memory in (EpisodicMemory(provider, namespace="gcnt"), reader):
            assert [e.outcome for e in await memory.load()] == ["success", "success"], state
            assert len(await memory.grades()) == 3
        await EpisodicMemory(provider, namespace="gcnt").grade(second.id, outcome="failure")
        assert await provider.retrieve_many(list(before)) == list(before.values())
        for memory in (EpisodicMemory(provider, namespace="gcnt"), reader, writer):
            assert [e.outcome for e in await memory.load()] == ["success", "failure"], state
            assert len(await memory.grades()) == 4
            assert (await memory.stats()).grades == 4

    @pytest.mark.parametrize("counter", ["__uses__", "u:2"])
    @pytest.mark.parametrize("state", ["missing", "garbled", "at its limit", "far ahead"])
    async def test_no_use_counter_state_refuses_a_use_or_hides_the_others(
        self, provider: MemoryProvider, counter: str, state: str
    ) -> None:
        """A use counter (the change counter, or one episode's count) edited or garbled: the
        next use is counted, and every reader, one that stays up included, reads the counts
        as stored."""
        writer = EpisodicMemory(provider, namespace="ucnt")
        first = await writer.record(ep("rotate the keys"))
        second = await writer.record(ep("renew the cert"))
        await writer.used(first.id)
        await writer.used(second.id)
        reader = EpisodicMemory(provider, namespace="ucnt")
        assert dict((await reader.stats()).most_used) == {first.id: 1, second.id: 1}
        await _damage_counter(provider, f"episodic:ucnt:{counter}", state)
        for _ in range(2):
            await EpisodicMemory(provider, namespace="ucnt").used([second.id, first.id])
        counts = dict((await EpisodicMemory(provider, namespace="ucnt").stats()).most_used)
        assert counts[first.id] == 3
        if counter == "u:2" and state != "missing":
            # the damaged count itself is no count (unreadable, or past any real count): it
            # started over
            assert counts[second.id] == 2, state
        else:
            assert counts[second.id] == (3 if counter == "__uses__" else 2)
        assert dict((await reader.stats()).most_used) == counts
        assert await writer.load() == await reader.load()

    async def test_a_reader_that_stays_up_reads_a_grade_written_after_its_number(
        self, provider: MemoryProvider
    ) -> None:
        """A grade is a number, then a record: a reader that syncs in between reads the grade
        when it lands, and never takes it for swept."""
        writer = EpisodicMemory(provider, namespace="late")
        first = await writer.record(ep("flush the cache", outcome="failure"))
        second = await writer.record(ep("drain the queue", outcome="failure"))
        reader = EpisodicMemory(provider, namespace="late")
        await reader.load()
        await writer.grade(first.id, outcome="success")
        await writer.grade(second.id, outcome="success")
        # the first grade's record not yet written: its writer is between its two steps
        raw = (await provider.retrieve_many(["episodic:late:g:1"]))[0]
        assert raw
        await provider.delete(["episodic:late:g:1"])
        assert [e.outcome for e in await reader.load()] == ["failure", "success"]
        await provider.write({"episodic:late:g:1": raw})
        assert [e.outcome for e in await reader.load()] == ["success", "success"]
        assert len(await reader.grades()) == 2
        found = await reader.select(outcome="success")
        assert {e.id for e in found} == {first.id, second.id}
        # a later grade of the same episode still wins over one read late
        await writer.grade(first.id, outcome="failure")
        raw = (await provider.retrieve_many(["episodic:late:g:3"]))[0]
        assert raw
        await provider.delete(["episodic:late:g:3"])
        await writer.grade(first.id, outcome="partial")
        assert (await reader.load())[0].outcome == "partial"
        await provider.write({"episodic:late:g:3": raw})
        assert (await reader.load())[0].outcome == "partial"
        assert [g.outcome for g in await reader.grades(first.id)] == [
            "success",
            "failure",
            "partial",
        ]

    @pytest.mark.parametrize("after", ["fewer", "as many", "more"])
    async def test_a_reader_notices_the_log_went_back_and_reads_it_again(
        self, provider: MemoryProvider, after: str
    ) -> None:
        """The store restored from an older snapshot (a restart from an RDB file, a restored
        backup, a promoted replica) under the same change token: a reader that stays up shows
        the log as it now is, never episodes or grades that no longer exist."""
        writer = EpisodicMemory(provider, namespace="back")
        for i in range(5):
            await writer.record(ep(f"kept {i}"))
        await writer.grade((await writer.load())[0].id, outcome="success")
        keys = await provider.keys("episodic:back:")
        snapshot = dict(zip(keys, await provider.retrieve_many(keys), strict=True))
        for i in range(5):
            await writer.record(ep(f"lost {i}"))
        lost = await writer.grade((await writer.load())[1].id, outcome="success")
        reader = EpisodicMemory(provider, namespace="back")
        assert len(await reader.load()) == 10
        # the snapshot comes back
        await provider.delete(await provider.keys("episodic:back:"))
        await provider.write({k: v for k, v in snapshot.items() if v is not None})
        n = {"fewer": 2, "as many": 5, "more": 8}[after]
        again = EpisodicMemory(provider, namespace="back")
        for i in range(n):
            await again.record(ep(f"new {i}"))
        expected = [f"kept {i}" for i in range(5)] + [f"new {i}" for i in range(n)]
        for memory in (reader, writer, again):
            assert [e.query for e in await memory.load()] == expected, after
            assert lost.episode_id not in {g.episode_id for g in await memory.grades()}
            assert [e.outcome for e in await memory.load()][:2] == ["success", "unknown"]
            found = {e.query for e in (await memory.recall("new lost kept", top_k=20))}
            assert not any(q.startswith("lost") for q in found)

    # --- keys(prefix) with any character -------------------------------------------------------

    async def test_keys_returns_exactly_the_keys_that_start_with_the_prefix(
        self, provider: MemoryProvider
    ) -> None:
        written = {
            f"episodic:{ns}:{suffix}": f"value of {ns!r}"
            for ns in KEY_NAMESPACES
            for suffix in ("__seq__", "e:1", "e:10")
        }
        written["episodic:a"] = "a key that only looks related"
        written["episodic:"] = "the bare prefix"
        await provider.write(written)
        prefixes = {""}
        for key in written:  # every cut of every key: the namespace prefix and its neighbours
            prefixes.update(key[:i] for i in range(len("episodic:") - 1, len(key) + 1))
        for prefix in sorted(prefixes):
            expected = sorted(k for k in written if k.startswith(prefix))
            assert await provider.keys(prefix) == expected, prefix
        # a prefix, not a substring: these are inside every key, at the start of none
        for inside in ("pisodic:", ":", "e:1", "__seq__", "a*b?[c]{d}:"):
            assert await provider.keys(inside) == [], inside
        assert await provider.retrieve_many(list(written)) == list(written.values())
        await provider.delete([f"episodic:{ns}:e:1" for ns in KEY_NAMESPACES])
        assert await provider.keys("episodic:a:") == [
            "episodic:a::__seq__",
            "episodic:a::e:10",
            "episodic:a:__seq__",
            "episodic:a:e:10",
        ]

    # --- vectors (recall by meaning) ---------------------------------------------------------

    async def test_vectors_are_stored_with_each_episode_and_read_back(
        self, provider: MemoryProvider
    ) -> None:
        pytest.importorskip("numpy")
        writer = EpisodicMemory(provider, namespace="vec", embedder=ConceptEmbedder())
        for query in _CONCEPT_EPISODES:
            await writer.record(ep(query))
        raw = await provider.retrieve_many(["episodic:vec:v:1", "episodic:vec:__embedder__"])
        assert raw[0] is not None
        assert raw[1] is not None
        # compact: float16 in base64 (4 bytes per 3 characters) plus a short header
        assert len(raw[0]) <= ConceptEmbedder.dimension * 2 * 4 // 3 + 64
        assert json.loads(raw[1]) == {"name": "concepts", "dimension": ConceptEmbedder.dimension}
        reader = EpisodicMemory(provider, namespace="vec", embedder=ConceptEmbedder())
        stats = await reader.stats()
        assert stats.vectors == len(_CONCEPT_EPISODES)
        assert stats.embedder == f"concepts ({ConceptEmbedder.dimension} dimensions)"
        # shares no word with its target: only the vectors can find it
        found = await reader.explain("payment taken two times")
        assert found.by == "hybrid"
        assert [s.episode.query for s in found][:1] == ["customer billed double"]
        assert found[0].keyword == 0
        assert found[0].similarity is not None
        assert found[0].meaning > 0
        # unrelated: nothing, with vectors as without
        assert await reader.recall("bake sourdough bread") == []

    async def test_no_vector_outlives_its_episode(self, provider: MemoryProvider) -> None:
        pytest.importorskip("numpy")
        memory = EpisodicMemory(
            provider, namespace="vecring", max_episodes=3, embedder=ConceptEmbedder()
        )
        for i in range(6):
            await memory.record(ep(f"customer billed double {i}"))
        vectors = await provider.keys("episodic:vecring:v:")
        assert sorted(vectors) == [f"episodic:vecring:v:{i}" for i in (4, 5, 6)]
        first = (await memory.load())[0]
        await memory.forget([first.id])
        assert "episodic:vecring:v:4" not in await provider.keys("episodic:vecring:v:")
        await memory.shrink(1)
        assert await provider.keys("episodic:vecring:v:") == ["episodic:vecring:v:6"]
        await memory.clear()
        assert await provider.keys("episodic:vecring:v:") == []

    async def test_a_log_of_another_embedder_is_refused_until_reembed(
        self, provider: MemoryProvider
    ) -> None:
        pytest.importorskip("numpy")
        old = EpisodicMemory(provider, namespace="vecswap", embedder=ConceptEmbedder())
        for query in _CONCEPT_EPISODES:
            await old.record(ep(query))
        new = EpisodicMemory(provider, namespace="vecswap", embedder=ConceptEmbedder("other"))
        with pytest.raises(EmbedderMismatchError) as caught:
            await new.recall("payment taken two times")
        assert "'concepts'" in str(caught.value)
        assert "'other'" in str(caught.value)
        with pytest.raises(EmbedderMismatchError):
            await new.record(ep("customer billed double again"))
        with pytest.raises(EmbedderMismatchError):
            await new.backfill()
        seen: list[tuple[int, int]] = []
        written = await new.reembed(batch_size=2, progress=lambda d, t: seen.append((d, t)))
        assert written == len(_CONCEPT_EPISODES)
        assert seen == [(0, written), (2, written), (written, written)]
        found = await new.recall("payment taken two times")
        assert [e.query for e in found][:1] == ["customer billed double"]
        assert (await new.stats()).vectors == len(_CONCEPT_EPISODES)
        with pytest.raises(EmbedderMismatchError):
            await old.recall("payment taken two times")
        # keyword-only memories read the log as before
        plain = EpisodicMemory(provider, namespace="vecswap")
        assert len(await plain.recall("customer billed")) >= 1

    async def test_episodes_without_vectors_are_found_by_keywords_then_backfilled(
        self, provider: MemoryProvider
    ) -> None:
        pytest.importorskip("numpy")
        plain = EpisodicMemory(provider, namespace="vecfill")
        for query in _CONCEPT_EPISODES:
            await plain.record(ep(query))
        memory = EpisodicMemory(provider, namespace="vecfill", embedder=ConceptEmbedder())
        assert (await memory.stats()).vectors == 0
        assert [e.query for e in await memory.recall("customer billed")][:1] == [
            "customer billed double"
        ]
        assert await memory.recall("payment taken two times") == []
        assert await memory.backfill(batch_size=2) == len(_CONCEPT_EPISODES)
        assert await memory.backfill() == 0  # nothing left to do
        assert [e.query for e in await memory.recall("payment taken two times")][:1] == [
            "customer billed double"
        ]
        other = EpisodicMemory(provider, namespace="vecfill", embedder=ConceptEmbedder())
        assert (await other.stats()).vectors == len(_CONCEPT_EPISODES)

    async def test_a_failing_embedder_never_costs_an_episode(
        self, provider: MemoryProvider
    ) -> None:
        pytest.importorskip("numpy")
        embedder = ConceptEmbedder()
        memory = EpisodicMemory(provider, namespace="vecfail", embedder=embedder)
        await memory.record(ep("customer billed double"))
        for failure in ("raise", "wrong-count", "nan", "zero", "dimension"):
            embedder.failure = failure
            stored = await memory.record(ep(f"login broken {failure}"))
            assert stored.id in {e.id for e in await memory.load()}
            ranking = await memory.explain("customer billed")
            assert ranking.by == "keywords-fallback"
            assert ranking.embedder_error
            assert [s.episode.query for s in ranking] == ["customer billed double"]
        assert memory.counters.embedding_failures == 10
        embedder.failure = None
        assert (await memory.stats()).vectors == 1
        assert await memory.backfill() == 5
        assert (await memory.explain("customer billed")).by == "hybrid"

    # --- outcomes learnt later: grades and uses (append-only) -------------------------------

    async def test_a_grade_is_a_record_of_its_own_applied_on_every_read_path(
        self, provider: MemoryProvider
    ) -> None:
        memory = EpisodicMemory(provider, namespace="graded")
        first = await memory.record(ep("export the audit log", tags=["ops"]))
        await memory.record(ep("export the audit log again", outcome="failure"))
        stored = await provider.retrieve_many(["episodic:graded:e:1"])
        await memory.grade(first.id, outcome="success", note="the user confirmed")
        # the episode's own record is untouched; a fresh reader sees the grade everywhere
        assert await provider.retrieve_many(["episodic:graded:e:1"]) == stored
        fresh = EpisodicMemory(provider, namespace="graded")
        assert [e.outcome for e in await fresh.load()] == ["success", "failure"]
        assert (await fresh.stats()).by_outcome["success"] == 1
        assert [e.id for e in await fresh.select(outcome="success")] == [first.id]
        found = await fresh.recall("export the audit log", intent="what_worked")
        assert found[0].id == first.id
        assert found[0].outcome == "success"
        # a claim never beats a verified grade; the newest verified grade wins
        await fresh.grade(first.id, outcome="failure", verified=False)
        assert (await fresh.load())[0].outcome == "success"
        await fresh.grade(first.id, score=0.1, note="broke again next day")
        assert next((e.outcome, e.score) for e in await fresh.load()) == ("failure", 0.1)
        assert [g.outcome for g in await memory.grades(first.id)] == [
            "success",
            "failure",
            "failure",
        ]
        with pytest.raises(ConfigurationError, match="no episode"):
            await memory.grade("no-such-id", outcome="success")
        with pytest.raises(ConfigurationError, match="score"):
            await memory.grade(first.id, score=7)

    async def test_an_unverified_success_reads_as_a_claim(self, provider: MemoryProvider) -> None:
        memory = EpisodicMemory(provider, namespace="claims")
        episode = await memory.record(ep("rotate the signing key"))
        await memory.grade(episode.id, outcome="success", verified=False)
        assert (await memory.load())[0].outcome == "claimed_success"
        verified = await memory.record(ep("rotate the signing key", outcome="failure"))
        await memory.grade(verified.id, outcome="success", verified=False)
        assert (await memory.load())[1].outcome == "failure"  # verified beats a claim

    async def test_grades_and_uses_go_with_their_episode(self, provider: MemoryProvider) -> None:
        memory = EpisodicMemory(provider, namespace="gone", max_episodes=3)
        kept = await memory.record(ep("keep this one"))
        doomed = await memory.record(ep("forget this one"))
        await memory.grade(doomed.id, outcome="success")
        await memory.grade(kept.id, outcome="failure")
        await memory.used([doomed.id, kept.id])
        await memory.forget([doomed.id])
        assert len(await provider.keys("episodic:gone:g:")) == 1
        assert await provider.keys("episodic:gone:u:") == ["episodic:gone:u:1"]
        for i in range(4):  # the ring evicts the graded, used episode
            await memory.record(ep(f"filler {i}"))
        assert await memory.sweep() >= 2
        assert await provider.keys("episodic:gone:g:") == []
        assert await provider.keys("episodic:gone:u:") == []
        await memory.clear()
        left = await provider.keys("episodic:gone:")
        assert [k for k in left if k.split(":")[2] in ("e", "g", "u", "v")] == []

    async def test_uses_are_counted_beside_the_episode_and_boost_it_a_little(
        self, provider: MemoryProvider
    ) -> None:
        memory = EpisodicMemory(provider, namespace="uses")
        used = await memory.record(ep("restart the worker pool"))
        other = await memory.record(ep("restart the worker pool"))
        stored = await provider.retrieve_many(["episodic:uses:e:1"])
        for _ in range(50):
            await memory.used([used.id])
        assert await provider.retrieve_many(["episodic:uses:e:1"]) == stored
        fresh = EpisodicMemory(provider, namespace="uses")
        assert (await fresh.stats()).most_used == [(used.id, 50)]
        ranked = await fresh.explain("restart the worker pool")
        assert [s.episode.id for s in ranked] == [used.id, other.id]  # beats the newer twin
        assert ranked[0].uses == 50
        assert ranked[0].score <= ranked[1].score * 1.2 + 1e-9  # at most +20%
        plain = EpisodicMemory(provider, namespace="uses", reinforce=False)
        assert [e.id for e in await plain.recall("restart the worker pool")] == [other.id, used.id]

    async def test_no_operation_rewrites_an_episode_or_a_grade(
        self, provider: MemoryProvider
    ) -> None:
        watched = _Rewrites(provider)
        memory = EpisodicMemory(watched, namespace="frozen", max_episodes=4)
        first = await memory.record(ep("deploy the api", run_id="run-1", outcome="failure"))
        await memory.record(ep("deploy the api", run_id="run-1", outcome="success"))
        await memory.grade(first.id, outcome="failure", note="rolled back")
        await memory.used([first.id])
        await memory.recall("deploy the api")
        for i in range(6):
            await memory.record(ep(f"other work {i}", score=0.9))
        await memory.sweep()
        await memory.shrink(3)
        await memory.forget(outcome="success")
        if _numpy_here():
            meaning = EpisodicMemory(watched, namespace="frozen", embedder=ConceptEmbedder())
            await meaning.backfill()
            await meaning.reembed()
        assert watched.rewrites == []
        assert watched.writes > 10  # it did watch something

    async def test_recall_shows_one_item_per_run(self, provider: MemoryProvider) -> None:
        memory = EpisodicMemory(provider, namespace="runs")
        for i, outcome in enumerate(["failure", "failure", "success"]):
            await memory.record(
                ep(
                    "migrate the billing schema",
                    run_id="loop-7",
                    outcome=outcome,
                    reflection=f"lesson {i}",
                )
            )
        await memory.record(ep("migrate the billing schema by hand", outcome="partial"))
        found = await memory.explain("migrate the billing schema", 3)
        assert sorted(s.episode.run_id for s in found) == ["", "loop-7"]  # not three of one run
        (run,) = [s for s in found if s.episode.run_id]
        assert run.iterations == 3
        assert run.episode.outcome == "success"  # the run's latest iteration
        assert run.episode.reflection == "lesson 2 Earlier attempts: lesson 0; lesson 1"
        assert len(await memory.load()) == 4  # the raw iterations stay


PRINTABLE_NAMESPACES = [
    "support bot",
    "tenant/42",
    "agent:v2",
    "user@example.com",
    "équipe",
    "a*b?[c]",
    "x}y{z",
    "100%",
    "emoji 🧠",
    ".hidden",
    "-dash",
]

KEY_NAMESPACES = [
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


def _numpy_here() -> bool:
    import importlib.util

    return importlib.util.find_spec("numpy") is not None


_WRITE_ONCE = re.compile(r"episodic:[^:]+:[eg]:[0-9]+")


class _Rewrites(MemoryProvider):
    """Records every write that would change an episode's or a grade's value: one that held
    another value in the store, or that this provider saw written with another value before
    (an atomic step writes keys it cannot read first: a reused sequence number shows here)."""

    def __init__(self, inner: MemoryProvider) -> None:
        self.inner = inner
        self.rewrites: list[str] = []
        self.writes = 0
        self._written: dict[str, str] = {}

    def _note(self, items: Mapping[str, str]) -> None:
        self.writes += len(items)
        for key, value in items.items():
            if _WRITE_ONCE.fullmatch(key):
                if self._written.get(key, value) != value:
                    self.rewrites.append(key)
                self._written[key] = value

    async def _check(self, items: Mapping[str, str]) -> None:
        watched = [k for k in items if _WRITE_ONCE.fullmatch(k)]
        if watched:
            for key, old in zip(watched, await self.inner.retrieve_many(watched), strict=True):
                if old is not None and old != items[key]:
                    self.rewrites.append(key)
        self._note(items)

    async def retrieve_many(self, keys: Sequence[str]) -> list[str | None]:
        return await self.inner.retrieve_many(keys)

    async def keys(self, prefix: str) -> list[str]:
        return await self.inner.keys(prefix)

    async def write_if(
        self,
        expect: Mapping[str, str | None],
        items: Mapping[str, str],
        delete: Collection[str] = (),
    ) -> bool:
        await self._check(items)
        return await self.inner.write_if(expect, items, delete)

    async def write(self, items: Mapping[str, str], delete: Collection[str] = ()) -> None:
        await self._check(items)
        await self.inner.write(items, delete)

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
        written: list[Mapping[str, str]] = []

        def watching(seq: int, values: Mapping[str, str | None]) -> tuple[Any, Any]:
            items, doomed = then(seq, values)
            written[:] = [items]  # a retried step keeps only what it finally wrote
            return items, doomed

        result = await self.inner.increment_and_write(
            key, watching, initial=initial, repair=repair, read=read, fresh=fresh
        )
        for items in written:
            self._note(items)
        return result

    async def aclose(self) -> None:
        """The inner provider belongs to the test."""


async def _damage_counter(provider: MemoryProvider, key: str, state: str) -> None:
    """Leave the counter *key* as a cache eviction, an older backup or a hand edit can."""
    if state in ("missing", "evicted"):
        await provider.delete([key])
        return
    values = {
        "zero": "0",
        "behind": "1",
        "garbled": "x7",
        "at its limit": "9" * 18,
        "past any count": str(10**16),
        "a ring ahead": "16",  # 6 episodes stored, a ring of 10: none left in its range
        "far ahead": str(10**15),
    }
    await provider.write({key: values[state]})


async def _corrupt(provider: MemoryProvider, key: str, value: str) -> None:
    """Damage a stored episode as a disk or another program would: a store that keeps
    episodes append-only (SQLite's trigger) refuses to change one, so it is deleted first."""
    await provider.delete([key])
    await provider.write({key: value})


def _needs_processes(provider: MemoryProvider) -> None:
    if not provider.shared_across_processes:
        pytest.skip(f"{type(provider).__name__} does not declare shared_across_processes")


async def _run_workers(
    commands: list[tuple[list[str], dict[str, str]]], *, together: bool = False
) -> list[bytes]:
    """Run every worker to its end; return their outputs. *together*: each worker prints
    "ready" once connected, and all are told to start when all are ready."""
    outputs: dict[int, bytes] = {}
    failures: dict[int, str] = {}
    ready = [anyio.Event() for _ in commands]
    go = anyio.Event()

    async def run(i: int, command: list[str], env: dict[str, str]) -> None:
        errors: list[bytes] = []
        async with await anyio.open_process(command, env=env) as child:
            assert child.stdin is not None
            assert child.stdout is not None
            assert child.stderr is not None
            stderr, out = child.stderr, BufferedByteReceiveStream(child.stdout)
            async with anyio.create_task_group() as tg:

                async def drain() -> None:
                    errors.extend([chunk async for chunk in stderr])

                tg.start_soon(drain)
                if together:
                    if await _line(out) == b"ready":
                        ready[i].set()
                        await go.wait()
                        await child.stdin.send(b"go\n")
                    else:
                        go.set()  # the others must not wait for this one
                outputs[i] = b"".join([chunk async for chunk in out])
            code = await child.wait()
            if code:
                failures[i] = f"exit status {code}: {b''.join(errors).decode()[-2000:]}"
            ready[i].set()

    async with anyio.create_task_group() as tg:
        for i, (command, env) in enumerate(commands):
            tg.start_soon(run, i, command, env)
        for event in ready:
            await event.wait()
        go.set()
    assert not any(failures.values()), failures
    return [outputs[i] for i in range(len(commands))]


async def _line(stream: BufferedByteReceiveStream) -> bytes:
    try:
        return (await stream.receive_until(b"\n", 99)).strip()
    except (anyio.EndOfStream, anyio.IncompleteRead, anyio.DelimiterNotFound):
        return b""


async def _assert_the_newest_are_kept(
    provider: MemoryProvider, namespace: str, written: int, kept: int
) -> None:
    """The last *kept* sequence numbers hold an episode: the newest ones.

    A provider that appends in one atomic step (``atomic_increment_and_write``) holds nothing
    else. One that appends in two (Redis: increment, then write) can be left a payload below
    the ring when a slow writer's write lands after its own eviction: no read path shows it,
    and ``sweep()`` deletes it.
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


def _plus_one(seq: int, values: Mapping[str, str | None]) -> tuple[dict[str, str], list[str]]:
    return {
        "episodic:bump:total": str(int(values["episodic:bump:total"] or 0) + 1),
        f"episodic:bump:e:{seq}": "x",
    }, []


async def _bump(provider: MemoryProvider) -> None:
    await provider.increment_and_write("episodic:bump:seq", _plus_one, read=["episodic:bump:total"])


class _Counting(MemoryProvider):
    """Counts provider calls (each one is a round trip on a networked store)."""

    def __init__(self, inner: MemoryProvider) -> None:
        self.inner = inner
        self.calls: list[str] = []

    async def retrieve_many(self, keys: Sequence[str]) -> list[str | None]:
        self.calls.append("retrieve_many")
        return await self.inner.retrieve_many(keys)

    async def keys(self, prefix: str) -> list[str]:
        self.calls.append("keys")
        return await self.inner.keys(prefix)

    async def write_if(
        self,
        expect: Mapping[str, str | None],
        items: Mapping[str, str],
        delete: Collection[str] = (),
    ) -> bool:
        self.calls.append("write_if")
        return await self.inner.write_if(expect, items, delete)

    async def write(self, items: Mapping[str, str], delete: Collection[str] = ()) -> None:
        self.calls.append("write")
        await self.inner.write(items, delete)

    async def delete(self, keys: Iterable[str]) -> None:
        self.calls.append("delete")
        await self.inner.delete(keys)

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
        self.calls.append("increment_and_write")
        return await self.inner.increment_and_write(
            key, then, initial=initial, repair=repair, read=read, fresh=fresh
        )

    async def aclose(self) -> None:
        """The inner provider belongs to the test."""


async def _calls_for_cold_reads(
    provider: MemoryProvider, n: int
) -> tuple[list[str], list[str], list[str]]:
    namespace = f"rt{n}"
    writer = EpisodicMemory(provider, namespace=namespace, max_episodes=1000)
    for i in range(n):
        await writer.record(ep(f"deploy service {i}", tags=["devops"]))
    counting = _Counting(provider)
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
