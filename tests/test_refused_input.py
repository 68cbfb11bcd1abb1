"""What the memory refuses before it stores anything: a namespace, an episode or an id it
cannot keep, and a log layout it cannot tell apart; each with a typed error naming it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from deepcrew_episodic import (
    ConfigurationError,
    Episode,
    EpisodicMemory,
    InvalidEpisodeError,
)
from deepcrew_episodic.providers import InMemoryProvider, MemoryProvider

pytestmark = pytest.mark.anyio


@pytest.fixture
def provider() -> MemoryProvider:
    """The library's own logic, once: a dict store (the conformance kit covers the stores)."""
    return InMemoryProvider()


def ep(query: str, **fields: Any) -> Episode:
    return Episode(query=query, response=fields.pop("response", "ok"), **fields)


@pytest.mark.parametrize(
    "namespace",
    ["", "ns\n", "a\x1bb", "a\u200bb", "a\u202eb", "a\ud800", "x" * 257, None, 42],
)
async def test_bad_namespace_raises_value_error(provider: MemoryProvider, namespace: Any) -> None:
    with pytest.raises(ValueError, match="namespace"):
        EpisodicMemory(provider, namespace=namespace)
    with pytest.raises(ConfigurationError):
        EpisodicMemory(provider, namespace=namespace)


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
    provider: MemoryProvider, fields: dict[str, Any], named: str
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


async def test_an_id_holding_a_secret_is_refused(provider: MemoryProvider) -> None:
    memory = EpisodicMemory(provider, namespace="secret-id")
    with pytest.raises(InvalidEpisodeError, match="secret"):
        await memory.record(ep("q", id="AKIAIOSFODNN7EXAMPLE"))
    assert await memory.load() == []
    assert await provider.keys("") == []


async def test_the_one_ambiguous_layout_is_refused(provider: MemoryProvider) -> None:
    """deepcrew-ai's slots of a log named "x:e" are spelt like our entries of "x"."""
    await EpisodicMemory(provider, namespace="x").record(ep("ours"))
    await provider.write({"episodic:x:e:__meta__": json.dumps({"count": 1, "next": 0})})
    with pytest.raises(ConfigurationError, match="overlap"):
        await EpisodicMemory(provider, namespace="x").load()
    with pytest.raises(ConfigurationError, match="overlap"):
        await EpisodicMemory(provider, namespace="x:e").load()
