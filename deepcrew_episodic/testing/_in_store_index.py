"""The recall index kept in the store: what a provider that declares ``recall_index`` keeps in
step with every write, and what a memory that reads it returns."""

from __future__ import annotations

from typing import Any, ClassVar

from .. import Episode, EpisodicMemory
from ..providers import MemoryProvider
from ._capability import Capability, ep

__all__ = ["InStoreIndex"]

NOW = 1_800_000_000.0  # a fixed clock: the two rankings compared must share their "now"


def _clock() -> float:
    return NOW


def _memory(provider: MemoryProvider, **options: Any) -> EpisodicMemory:
    options.setdefault("clock", _clock)
    return EpisodicMemory(provider, namespace=options.pop("namespace", "ix"), **options)


async def _both(provider: MemoryProvider, query: str, **options: Any) -> tuple[Any, Any]:
    """The ranking a fresh memory reads from the store's index, and the one a memory that
    read the whole log computes in process, for the same query."""
    ranking_options = {k: options.pop(k) for k in list(options) if k in _CALL}
    fresh = _memory(provider, **options)
    from_store = await fresh.explain(query, **ranking_options)
    assert not fresh._log.synced, "a fresh memory on a recall_index provider read the log"
    holding = _memory(provider, **options)
    await holding.load()
    return from_store, await holding.explain(query, **ranking_options)


_CALL = {"top_k", "intent", "tags", "outcome", "since", "until", "min_relevance"}


def _same(a: Any, b: Any) -> None:
    def view(ranking: Any) -> list[tuple[Any, ...]]:
        return [
            (s.episode.id, s.score, s.relevance, s.outcome_weight, s.matched, s.uses, s.iterations)
            for s in ranking
        ]

    assert view(a) == view(b)
    assert [s.episode.id for s in a.under_floor] == [s.episode.id for s in b.under_floor]
    assert [s.episode.reflection for s in a] == [s.episode.reflection for s in b]


class InStoreIndex(Capability):
    """A provider that declares ``recall_index`` keeps the recall index beside the log, in the
    same atomic step as every write and delete, and answers ``read_index``: a memory that has
    not read the log then ranks from it, and must return exactly what the in-process ranking
    returns (episodes, scores, parts, what fell under the floor)."""

    capability: ClassVar[str] = "in-store index"
    declared_by: ClassVar[str | None] = "recall_index"

    async def test_recall_from_the_store_equals_the_in_process_ranking(
        self, provider: MemoryProvider
    ) -> None:
        memory = _memory(provider)
        for i in range(30):
            await memory.record(
                ep(
                    f"deploy service {i % 5} to staging",
                    outcome="failure" if i % 3 else "success",
                    tags=[f"team{i % 2}"],
                    reflection="check the migration first" if i % 4 == 0 else None,
                    timestamp=f"2026-12-0{1 + i % 9}T10:00:{i:02d}Z",
                )
            )
        for intent in ("any", "what_failed", "what_worked"):
            _same(*await _both(provider, "deploy service 3 staging", intent=intent, top_k=5))
        _same(*await _both(provider, "deploy the migration", tags=["team1"], top_k=4))
        _same(*await _both(provider, "staging", outcome="success", min_relevance=0.0))

    async def test_grades_and_uses_given_later_rank_from_the_store(
        self, provider: MemoryProvider
    ) -> None:
        memory = _memory(provider)
        stored = [await memory.record(ep(f"rotate the api key {i}")) for i in range(6)]
        await memory.grade(stored[1].id, outcome="failure", source="verifier")
        await memory.grade(stored[2].id, outcome="success", source="agent")
        await memory.used([stored[4].id, stored[4].id])
        await memory.used(stored[4].id)
        for intent in ("any", "what_failed", "what_worked"):
            a, b = await _both(provider, "rotate api key", intent=intent, top_k=6)
            _same(a, b)
        a, _ = await _both(provider, "rotate api key", intent="what_failed", top_k=1)
        assert a[0].episode.id == stored[1].id
        assert a[0].episode.outcome == "failure"

    async def test_a_run_is_one_item_from_the_store(self, provider: MemoryProvider) -> None:
        memory = _memory(provider)
        for i in range(3):
            await memory.record(
                ep(
                    "migrate the billing tables",
                    run_id="run-1",
                    outcome="failure" if i < 2 else "success",
                    reflection=f"attempt {i} lesson",
                )
            )
        await memory.record(ep("migrate the billing tables again", run_id="run-2"))
        a, b = await _both(provider, "migrate billing tables", top_k=3)
        _same(a, b)
        assert [s.iterations for s in a if s.episode.run_id == "run-1"] == [3]

    async def test_what_is_deleted_leaves_the_index_with_it(self, provider: MemoryProvider) -> None:
        memory = _memory(provider, max_episodes=5)
        stored = [await memory.record(ep(f"invoice {i} failed to send")) for i in range(8)]
        await memory.forget(stored[-1].id)
        a, b = await _both(provider, "invoice failed send", max_episodes=5, top_k=10)
        _same(a, b)
        shown = {s.episode.id for s in a}
        assert stored[-1].id not in shown  # forgotten
        assert not shown & {e.id for e in stored[:3]}  # evicted by the ring
        await memory.clear()
        a, _ = await _both(provider, "invoice failed send", max_episodes=5)
        assert list(a) == []

    async def test_a_smaller_view_of_a_larger_ring_reads_only_its_view(
        self, provider: MemoryProvider
    ) -> None:
        large = _memory(provider, max_episodes=50)
        for i in range(20):
            await large.record(ep(f"reset the password for user {i}", tags=["auth"]))
        a, b = await _both(provider, "reset password user", max_episodes=4, top_k=10)
        _same(a, b)
        assert len(a) == 4

    async def test_expired_episodes_are_never_read_from_the_store(
        self, provider: MemoryProvider
    ) -> None:
        memory = _memory(provider)
        kept = await memory.record(ep("renew the tls certificate"))
        await memory.record(
            ep("renew the tls certificate now", forget_after="2027-01-01T00:00:00Z")
        )
        from datetime import timedelta

        a, b = await _both(provider, "renew tls certificate", max_age=timedelta(days=3650))
        _same(a, b)
        assert [s.episode.id for s in a] == [kept.id]

    async def test_a_record_by_another_memory_is_seen_by_the_next_recall(
        self, provider: MemoryProvider
    ) -> None:
        reader = _memory(provider)
        assert await reader.recall("quarterly report export") == []
        stored = await _memory(provider).record(ep("quarterly report export broke"))
        found = await reader.recall("quarterly report export")
        assert [e.id for e in found] == [stored.id]
        assert isinstance(found[0], Episode)
        assert not reader._log.synced
