"""The episode log on the provider: the log's guarantees that depend on how the provider
keeps them (the ring, clear, corrupt data, counters, grades, uses and vectors, round trips)."""

from __future__ import annotations

import json
from typing import ClassVar

import anyio
import pytest

from .. import (
    ConfigurationError,
    Episode,
    EpisodicMemory,
    InvalidEpisodeError,
)
from ..providers import MemoryProvider
from ._capability import Capability, ep
from ._embedder import CONCEPT_EPISODES as _CONCEPT_EPISODES
from ._embedder import ConceptEmbedder
from ._store import StoreSpec
from ._watching import Counting, Rewrites

__all__ = ["EpisodeLog"]


class EpisodeLog(Capability):
    """What ``EpisodicMemory`` guarantees on this provider: no lost or duplicated episode, the ring
    across writers of any size, clear and namespaces isolated, corrupt data skipped, counted and
    left in place, counters never trusted over their records, grades, uses and vectors going
    with their episode, nothing rewritten, and a constant number of round trips per recall.
    Required of every provider.
    """

    capability: ClassVar[str] = "episode log"

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
        await assert_the_newest_are_kept(provider, "conc", 500, min(500, max_episodes))

    async def test_recall_and_load_cost_constant_round_trips(
        self, provider: MemoryProvider
    ) -> None:
        small = await _calls_for_cold_reads(provider, 5)
        large = await _calls_for_cold_reads(provider, 300)
        assert small == large
        cold, warm, after_write = large
        # The index keys; the episode records listed (no counter is trusted over them: a store
        # that keeps a recall index asks it instead); then every live episode.
        assert cold == ["retrieve_many", "keys", "retrieve_many"]
        assert warm == ["retrieve_many"]  # nothing new: the index keys only
        assert after_write == ["retrieve_many", "retrieve_many"]  # index keys, the new episode

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

    async def test_a_record_another_program_left_undecodable_is_skipped_and_counted(
        self, store: StoreSpec, provider: MemoryProvider
    ) -> None:
        memory = EpisodicMemory(provider, namespace="raw")
        await memory.record(ep("readable before"))
        await memory.record(ep("readable after"))
        try:
            store.write_raw(b"episodic:raw:e:2", b'{"query": "caf\xe9 \xff", "response": "r"}')
        except NotImplementedError:
            pytest.skip("the store holds no bytes that another program could leave undecodable")
        fresh = EpisodicMemory(provider, namespace="raw")
        assert [e.query for e in await fresh.load()] == ["readable before"]
        assert fresh.counters.corrupt_records == 1
        assert len(await fresh.recall("readable")) == 1
        assert await fresh.forget(corrupt=True) == 1
        assert await provider.keys("episodic:raw:e:") == ["episodic:raw:e:1"]
        await fresh.record(ep("readable again"))
        assert [e.query for e in await EpisodicMemory(provider, namespace="raw").load()] == [
            "readable before",
            "readable again",
        ]

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

    async def test_a_counter_lowered_onto_a_gap_hides_no_episode_after_it(
        self, provider: MemoryProvider
    ) -> None:
        """The counter lowered to just below a forgotten episode: the record past it is
        missing, and the episodes after the gap are still every reader's."""
        memory = EpisodicMemory(provider, namespace="gap", max_episodes=5)
        stored = [await memory.record(ep(f"task {i}")) for i in range(8)]
        assert await memory.forget(stored[5].id) == 1  # the ring keeps 4..8; 6 forgotten
        await provider.write({"episodic:gap:__seq__": "3"})
        expected = [f"task {i}" for i in (3, 4, 6, 7)]
        fresh = EpisodicMemory(provider, namespace="gap", max_episodes=5)
        assert [e.query for e in await fresh.load()] == expected
        # A writer that read nothing first numbers after them too (4 and 5 are free: the
        # ring evicted them), and nothing it writes falls out of view or to a sweep.
        writer = EpisodicMemory(provider, namespace="gap", max_episodes=5)
        await writer.record(ep("task 8"))
        again = EpisodicMemory(provider, namespace="gap", max_episodes=5)
        assert [e.query for e in await again.load()] == [*expected[1:], "task 8"]
        assert await again.sweep() == 0
        assert [e.query for e in await again.load()] == [*expected[1:], "task 8"]

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

    async def test_no_operation_rewrites_an_episode_or_a_grade(
        self, provider: MemoryProvider
    ) -> None:
        watched = Rewrites(provider)
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


def _numpy_here() -> bool:
    import importlib.util

    return importlib.util.find_spec("numpy") is not None


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


async def assert_the_newest_are_kept(
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
