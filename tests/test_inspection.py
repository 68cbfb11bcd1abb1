"""The public API a tool needs to inspect a log: open it at its own ring size, list what a
forget would delete, see expired episodes, and move time instead of sleeping (``clock``)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from deepcrew_episodic import ConfigurationError, Episode, EpisodicMemory
from deepcrew_episodic.providers import MemoryProvider

pytestmark = pytest.mark.anyio
DAY = 86400.0


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def test_open_adopts_the_logs_ring_size(provider: MemoryProvider) -> None:
    writer = EpisodicMemory(provider, namespace="open", max_episodes=7)
    for i in range(9):
        await writer.record(Episode(query=f"task {i}"))
    opened = await EpisodicMemory.open(provider, namespace="open")
    assert opened.max_episodes == 7
    assert len(await opened.load()) == 7
    assert (await EpisodicMemory.open(provider, namespace="open", max_episodes=3)).max_episodes == 3
    fresh = await EpisodicMemory.open(provider, namespace="never-written")
    assert fresh.max_episodes == 100


async def test_time_moves_without_sleeping(provider: MemoryProvider) -> None:
    clock = Clock()
    memory = EpisodicMemory(provider, namespace="clock", max_age=timedelta(days=30), clock=clock)
    old = await memory.record(Episode(query="refund order old"))
    clock.now += 20 * DAY
    await memory.record(Episode(query="refund order new"))
    assert [e.query for e in await memory.recall("refund order")] == [
        "refund order new",
        "refund order old",
    ]
    clock.now += 15 * DAY  # the first is 35 days old now
    assert [e.query for e in await memory.load()] == ["refund order new"]
    assert [e.query for e in await memory.recall("refund order")] == ["refund order new"]
    everything = await memory.load(include_expired=True)
    assert [memory.is_expired(e) for e in everything] == [True, False]
    assert memory.render(everything).count("\n- [") == 1  # render never shows an expired one
    assert [e.id for e in await memory.select(containing="refund")] == [
        old.id,
        everything[1].id,
    ]
    assert await memory.forget(containing="old", dry_run=True) == 1
    assert len(await memory.load(include_expired=True)) == 2  # a dry run deletes nothing
    assert await memory.sweep() == 1
    assert await memory.load(include_expired=True) == [everything[1]]
    with pytest.raises(ConfigurationError, match="clock"):
        EpisodicMemory(provider, clock=5)  # type: ignore[arg-type]


async def test_select_needs_a_criterion(provider: MemoryProvider) -> None:
    with pytest.raises(ConfigurationError, match="clear"):
        await EpisodicMemory(provider).select()


async def test_namespaces_lists_every_log_of_a_store(provider: MemoryProvider) -> None:
    for namespace in ("support", "agent:v2", "équipe 1", "a*b"):
        await EpisodicMemory(provider, namespace=namespace).record(Episode(query="q"))
    await provider.write(
        {
            "episodic:legacy bot:__meta__": '{"count": 1, "next": 0}',
            "episodic:legacy bot:0": '{"query": "old"}',
            "unrelated:key": "x",
        }
    )
    assert await EpisodicMemory.namespaces(provider) == sorted(
        ["support", "agent:v2", "équipe 1", "a*b", "legacy bot"]
    )


async def test_open_reads_a_deepcrew_log_larger_than_the_default_whole(
    provider: MemoryProvider,
) -> None:
    import json

    items = {"episodic:big:__meta__": json.dumps({"count": 150, "next": 0})}
    items.update({f"episodic:big:{i}": json.dumps({"query": f"old {i}"}) for i in range(150)})
    await provider.write(items)
    opened = await EpisodicMemory.open(provider, namespace="big")
    assert opened.max_episodes == 150
    assert len(await opened.load()) == 150
