"""Decoding stored records: a newer writer's fields and a record nested past any sane depth."""

from __future__ import annotations

import json
from typing import Any

import pytest

from deepcrew_episodic import (
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


async def test_a_record_nested_too_deeply_is_skipped_not_fatal(provider: MemoryProvider) -> None:
    memory = EpisodicMemory(provider, namespace="deep")
    for i in range(3):
        await memory.record(ep(f"refund order {i}"))
    await provider.write({"episodic:deep:e:2": "[" * 100_000 + "]" * 100_000})
    fresh = EpisodicMemory(provider, namespace="deep")
    assert len(await fresh.load()) == 2
    assert len(await fresh.recall("refund order")) == 2
    assert (await fresh.stats()).corrupt == 1
    assert await fresh.forget(corrupt=True) == 1


async def test_unknown_fields_from_a_newer_writer_decode(provider: MemoryProvider) -> None:
    memory = EpisodicMemory(provider, namespace="newer")
    await memory.record(ep("first"))
    body = {"query": "from the future", "response": "r", "outcome": "success", "x": 0.4}
    await provider.write({"episodic:newer:e:2": json.dumps(body)})
    await provider.store("episodic:newer:__seq__", "2")
    loaded = await EpisodicMemory(provider, namespace="newer").load()
    assert [e.query for e in loaded] == ["first", "from the future"]
    assert loaded[1].outcome == "success"
