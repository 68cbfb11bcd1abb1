"""A page of the log, newest first (``EpisodicMemory.page``): the same page whether the store
keeps the recall index or the memory reads the log, with expired episodes left out and every
episode read as its grades make it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from deepcrew_episodic import Episode, EpisodicMemory, Page
from deepcrew_episodic.providers import MemoryProvider

pytestmark = pytest.mark.anyio

NOW = 1_800_000_000.0


def clock() -> float:
    return NOW


async def test_a_page_is_the_newest_shown_episodes_and_how_many_there_are(
    provider: MemoryProvider,
) -> None:
    memory = EpisodicMemory(provider, namespace="pages", clock=clock, max_age=timedelta(days=30))
    stored = [await memory.record(Episode(query=f"task {i}", response="ok")) for i in range(12)]
    await memory.record(
        Episode(query="old", response="ok", timestamp="2026-01-01T00:00:00Z")
    )  # older than max_age: never listed
    await memory.record(
        Episode(query="gone", response="ok", forget_after="2027-01-01T00:00:00Z")
    )  # past forget_after
    await memory.grade(stored[10].id, outcome="failure", note="it broke later")

    fresh = EpisodicMemory(provider, namespace="pages", clock=clock, max_age=timedelta(days=30))
    first = await fresh.page(5)
    assert isinstance(first, Page)
    assert first.total == 12
    assert [e.query for e in first.episodes] == [f"task {i}" for i in (11, 10, 9, 8, 7)]
    assert first.episodes[1].outcome == "failure"  # as its grade makes it
    last = await fresh.page(5, offset=10)
    assert [e.query for e in last.episodes] == ["task 1", "task 0"]
    assert (await fresh.page(5, offset=12)).episodes == []

    holding = EpisodicMemory(provider, namespace="pages", clock=clock, max_age=timedelta(days=30))
    everything = await holding.load()
    again = await holding.page(5)
    assert [e.id for e in again.episodes] == [e.id for e in first.episodes]
    assert again.total == first.total == len(everything)


async def test_a_smaller_view_lists_only_its_own_episodes(provider: MemoryProvider) -> None:
    large = EpisodicMemory(provider, namespace="view", clock=clock, max_episodes=50)
    for i in range(20):
        await large.record(Episode(query=f"run {i}", response="ok"))
    small = EpisodicMemory(provider, namespace="view", clock=clock, max_episodes=4)
    page = await small.page(10)
    assert page.total == 4
    assert [e.query for e in page.episodes] == ["run 19", "run 18", "run 17", "run 16"]


async def test_a_page_takes_counts_only() -> None:
    from deepcrew_episodic import ConfigurationError
    from deepcrew_episodic.providers import InMemoryProvider

    memory = EpisodicMemory(InMemoryProvider())
    with pytest.raises(ConfigurationError, match="limit"):
        await memory.page(-1)
    with pytest.raises(ConfigurationError, match="offset"):
        await memory.page(5, offset="2")  # type: ignore[arg-type]
