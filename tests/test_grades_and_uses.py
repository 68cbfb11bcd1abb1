"""Outcomes learnt later: a grade is a record of its own read on every path, an unverified
success is a claim, and uses are counted beside the episode and boost it a little."""

from __future__ import annotations

from typing import Any

import pytest

from deepcrew_episodic import (
    ConfigurationError,
    Episode,
    EpisodicMemory,
)
from deepcrew_episodic.providers import InMemoryProvider, MemoryProvider

pytestmark = pytest.mark.anyio


@pytest.fixture
def provider() -> MemoryProvider:
    """The library's own logic, once: a dict store (the conformance kit covers the stores)."""
    return InMemoryProvider()


def ep(query: str, **fields: Any) -> Episode:
    return Episode(query=query, response=fields.pop("response", "ok"), **fields)


async def test_a_grade_is_a_record_of_its_own_applied_on_every_read_path(
    provider: MemoryProvider,
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


async def test_an_unverified_success_reads_as_a_claim(provider: MemoryProvider) -> None:
    memory = EpisodicMemory(provider, namespace="claims")
    episode = await memory.record(ep("rotate the signing key"))
    await memory.grade(episode.id, outcome="success", verified=False)
    assert (await memory.load())[0].outcome == "claimed_success"
    verified = await memory.record(ep("rotate the signing key", outcome="failure"))
    await memory.grade(verified.id, outcome="success", verified=False)
    assert (await memory.load())[1].outcome == "failure"  # verified beats a claim


async def test_uses_are_counted_beside_the_episode_and_boost_it_a_little(
    provider: MemoryProvider,
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
