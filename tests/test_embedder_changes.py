"""Changing or losing the embedder: another model's log refused until reembedded, a log
without vectors backfilled, a failing model costing no episode."""

from __future__ import annotations

from typing import Any

import pytest

from deepcrew_episodic import (
    EmbedderMismatchError,
    Episode,
    EpisodicMemory,
)
from deepcrew_episodic.providers import InMemoryProvider, MemoryProvider
from deepcrew_episodic.testing._embedder import CONCEPT_EPISODES, ConceptEmbedder

pytestmark = pytest.mark.anyio


@pytest.fixture
def provider() -> MemoryProvider:
    """The library's own logic, once: a dict store (the conformance kit covers the stores)."""
    return InMemoryProvider()


def ep(query: str, **fields: Any) -> Episode:
    return Episode(query=query, response=fields.pop("response", "ok"), **fields)


async def test_a_log_of_another_embedder_is_refused_until_reembed(provider: MemoryProvider) -> None:
    pytest.importorskip("numpy")
    old = EpisodicMemory(provider, namespace="vecswap", embedder=ConceptEmbedder())
    for query in CONCEPT_EPISODES:
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
    assert written == len(CONCEPT_EPISODES)
    assert seen == [(0, written), (2, written), (written, written)]
    found = await new.recall("payment taken two times")
    assert [e.query for e in found][:1] == ["customer billed double"]
    assert (await new.stats()).vectors == len(CONCEPT_EPISODES)
    with pytest.raises(EmbedderMismatchError):
        await old.recall("payment taken two times")
    # keyword-only memories read the log as before
    plain = EpisodicMemory(provider, namespace="vecswap")
    assert len(await plain.recall("customer billed")) >= 1


async def test_episodes_without_vectors_are_found_by_keywords_then_backfilled(
    provider: MemoryProvider,
) -> None:
    pytest.importorskip("numpy")
    plain = EpisodicMemory(provider, namespace="vecfill")
    for query in CONCEPT_EPISODES:
        await plain.record(ep(query))
    memory = EpisodicMemory(provider, namespace="vecfill", embedder=ConceptEmbedder())
    assert (await memory.stats()).vectors == 0
    assert [e.query for e in await memory.recall("customer billed")][:1] == [
        "customer billed double"
    ]
    assert await memory.recall("payment taken two times") == []
    assert await memory.backfill(batch_size=2) == len(CONCEPT_EPISODES)
    assert await memory.backfill() == 0  # nothing left to do
    assert [e.query for e in await memory.recall("payment taken two times")][:1] == [
        "customer billed double"
    ]
    other = EpisodicMemory(provider, namespace="vecfill", embedder=ConceptEmbedder())
    assert (await other.stats()).vectors == len(CONCEPT_EPISODES)


async def test_a_failing_embedder_never_costs_an_episode(provider: MemoryProvider) -> None:
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
