"""``reembed()`` and ``backfill()`` racing ``record()``: an episode recorded while either runs
ends up with a usable vector before it returns, so recall by meaning finds it, on every
provider. The embedder pauses on a signal inside the rebuild, and the records happen then:
by the memory running it, by a memory still on the old model, and by a keyword-only writer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest
from stores import Store

from deepcrew_episodic import EmbedderMismatchError, Episode, EpisodicMemory
from deepcrew_episodic.providers import MemoryProvider
from deepcrew_episodic.testing._embedder import CONCEPT_EPISODES, ConceptEmbedder

pytestmark = pytest.mark.anyio

PARAPHRASES = {
    # each shares no word with its episode, only a meaning
    "customer billed double": "payment taken two times",
    "login broken after password reset": "cannot sign in",
    "website outage in the morning": "site down",
}


class Pausing(ConceptEmbedder):
    """A :class:`ConceptEmbedder` whose *pause_at*-th batch call waits for :attr:`go` (after
    setting :attr:`paused`): whatever happens meanwhile happens in the middle of the rebuild."""

    def __init__(self, name: str, pause_at: int) -> None:
        super().__init__(name)
        self.pause_at = pause_at
        self.batches = 0
        self.paused = anyio.Event()
        self.go = anyio.Event()

    async def embed(self, texts: list[str]) -> list[list[float]]:
        if len(texts) > 1 or self.pause_at == 1:  # a batch, not a record or a query
            self.batches += 1
            if self.batches == self.pause_at:
                self.paused.set()
                await self.go.wait()
        return await super().embed(texts)


@pytest.fixture
async def providers(store: Store) -> AsyncIterator[tuple[MemoryProvider, MemoryProvider]]:
    """Two providers on one store (one, twice, for the dict: it is not shared)."""
    first = store.open()
    second = first if store.kind == "dict" else store.open()
    async with first:
        if second is first:
            yield first, second
        else:
            async with second:
                yield first, second


async def _seed(provider: MemoryProvider, embedder: ConceptEmbedder) -> None:
    memory = EpisodicMemory(provider, namespace="race", embedder=embedder)
    for query in CONCEPT_EPISODES:
        await memory.record(Episode(query=query))


async def _found_by_meaning(provider: MemoryProvider, name: str) -> dict[str, str | None]:
    """What a fresh memory with embedder *name* recalls first for each paraphrase."""
    fresh = EpisodicMemory(provider, namespace="race", embedder=ConceptEmbedder(name))
    stats = await fresh.stats()
    assert stats.vectors == stats.total, "an episode was left without a usable vector"
    found: dict[str, str | None] = {}
    for target, paraphrase in PARAPHRASES.items():
        ranking = await fresh.explain(paraphrase, 1)
        assert ranking.by == "hybrid"
        found[target] = ranking[0].episode.query if ranking else None
    return found


@pytest.mark.parametrize("pause_at", [1, 2], ids=["before-the-switch", "after-the-switch"])
async def test_episodes_recorded_during_reembed_get_the_new_models_vectors(
    providers: tuple[MemoryProvider, MemoryProvider], pause_at: int
) -> None:
    first, second = providers
    await _seed(first, ConceptEmbedder("model-a"))
    new = Pausing("model-b", pause_at)
    rebuilding = EpisodicMemory(second, namespace="race", embedder=new)
    old = EpisodicMemory(first, namespace="race", embedder=ConceptEmbedder("model-a"))
    keywords = EpisodicMemory(first, namespace="race")
    written: list[int] = []

    async def reembed() -> None:
        written.append(await rebuilding.reembed(batch_size=2))

    async with anyio.create_task_group() as tg:
        tg.start_soon(reembed)
        with anyio.fail_after(10):
            await new.paused.wait()
        # Mid-rebuild: the memory rebuilding records, and so do an old worker and a writer
        # without any embedder.
        await rebuilding.record(Episode(query="customer billed double"))
        if pause_at == 1:
            await old.record(Episode(query="login broken after password reset"))
        else:  # after the switch the old model is refused, said aloud, and nothing is stored
            with pytest.raises(EmbedderMismatchError):
                await old.record(Episode(query="login broken after password reset"))
            await keywords.record(Episode(query="login broken after password reset"))
        await keywords.record(Episode(query="website outage in the morning"))
        new.go.set()
    total = len(await rebuilding.load())
    assert total == len(CONCEPT_EPISODES) + 3
    # Every episode, those recorded meanwhile included; after the switch, the rebuilding
    # memory's own record already carries the new model's vector.
    assert written == [total - (pause_at == 2)]
    found = await _found_by_meaning(first, "model-b")
    assert found == {target: target for target in PARAPHRASES}


async def test_episodes_recorded_during_backfill_get_vectors_too(
    providers: tuple[MemoryProvider, MemoryProvider],
) -> None:
    first, second = providers
    keywords = EpisodicMemory(first, namespace="race")
    for query in CONCEPT_EPISODES:
        await keywords.record(Episode(query=query))
    embedder = Pausing("model-a", 1)
    filling = EpisodicMemory(second, namespace="race", embedder=embedder)
    written: list[int] = []

    async def backfill() -> None:
        written.append(await filling.backfill(batch_size=2))

    async with anyio.create_task_group() as tg:
        tg.start_soon(backfill)
        with anyio.fail_after(10):
            await embedder.paused.wait()
        for query in PARAPHRASES:
            await keywords.record(Episode(query=query))
        embedder.go.set()
    total = len(await filling.load())
    assert written == [total]
    assert await _found_by_meaning(first, "model-a") == {t: t for t in PARAPHRASES}
