"""What EpisodicMemory takes and gives back: checked arguments, independent episodes, and
timestamps that can neither crash a read path nor make an episode immortal."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta

import pytest

from deepcrew_episodic import (
    ConfigurationError,
    Episode,
    EpisodicHook,
    EpisodicMemory,
    InvalidEpisodeError,
    LoopConfig,
)
from deepcrew_episodic.providers import InMemoryProvider, MemoryProvider

pytestmark = pytest.mark.anyio


# --- aliasing --------------------------------------------------------------------------------


async def test_returned_episodes_are_independent_of_the_memory(provider: MemoryProvider) -> None:
    memory = EpisodicMemory(provider, namespace="alias")
    await memory.record(Episode(query="refund a duplicate charge", tags=["billing"]))
    for read in (
        lambda: memory.load(),
        lambda: memory.recall("refund duplicate charge"),
    ):
        got = (await read())[0]
        got.tags.append("edited")
        got.tools_used.append("edited")
        got.query = "changed"
    hit = (await memory.explain("refund duplicate charge"))[0]
    hit.episode.tags.append("edited")
    assert (await memory.load())[0].tags == ["billing"]
    assert (await memory.load())[0].query == "refund a duplicate charge"
    # the recall index did not see the edit either
    assert await memory.recall("edited") == []
    assert len(await memory.recall("refund duplicate charge")) == 1


async def test_record_fills_in_the_callers_episode_and_returns_the_stored_copy(
    provider: MemoryProvider,
) -> None:
    memory = EpisodicMemory(provider, namespace="fill")
    key = "sk-proj-" + "Ab3dEf6hIj9kLmN0pQ2sTu5wXy8z"
    episode = Episode(query=f"rotate the API key {key}", tags=["security"])
    returned = await memory.record(episode)
    assert episode.id  # filled in on the caller's object, as deepcrew-ai 0.6 does
    assert episode.timestamp
    assert (returned.id, returned.timestamp) == (episode.id, episode.timestamp)
    assert key in episode.query  # the caller's text is left as given
    assert key not in returned.query  # what is returned is what was stored: redacted
    returned.tags.append("edited")
    stored = (await memory.load())[0]
    assert (stored.id, stored.timestamp) == (episode.id, episode.timestamp)
    # editing the caller's object after record changes nothing stored
    episode.tags.append("later")
    assert (await memory.load())[0].tags == ["security"]


async def test_record_stores_a_copy_of_a_dict_or_a_deepcrew_dataclass(
    provider: MemoryProvider,
) -> None:
    @dataclass
    class DeepcrewEpisode:  # deepcrew-ai 0.6's shape
        query: str
        response: str = ""
        outcome: str = "unknown"
        score: float | None = None
        tools_used: list[str] = field(default_factory=list)
        reflection: str | None = None
        tags: list[str] = field(default_factory=list)
        timestamp: str = ""
        agent_id: str = ""

    memory = EpisodicMemory(provider, namespace="copies")
    tags = ["a"]
    got = await memory.record({"query": "from a dict", "tags": tags})
    tags.append("b")
    got.tags.append("c")
    legacy = DeepcrewEpisode(query="from deepcrew", tags=["x"])
    await memory.record(legacy)
    legacy.tags.append("y")
    assert [e.tags for e in await memory.load()] == [["a"], ["x"]]


async def test_an_edit_after_construction_is_checked_on_record(provider: MemoryProvider) -> None:
    memory = EpisodicMemory(provider, namespace="edited")
    episode = Episode(query="q", tags=["ok"])
    episode.tags.append(5)  # type: ignore[arg-type]
    with pytest.raises(InvalidEpisodeError, match=r"tags\.1"):
        await memory.record(episode)
    episode = Episode(query="q")
    episode.tools_used.append("\udcff")
    with pytest.raises(InvalidEpisodeError, match=r"tools_used\.0"):
        await memory.record(episode)
    assert await memory.load() == []


# --- arguments -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda p: EpisodicMemory(p, recall_k=True), "recall_k"),
        (lambda p: EpisodicMemory(p, recall_k=2.0), "recall_k"),
        (lambda p: EpisodicMemory(p, max_episodes=True), "max_episodes"),
        (lambda p: EpisodicMemory(p, max_episodes=10**400), "max_episodes"),
        (lambda p: EpisodicMemory(p, half_life_days="30"), "half_life_days"),
        (lambda p: EpisodicMemory(p, half_life_days=float("nan")), "half_life_days"),
        (lambda p: EpisodicMemory(p, half_life_days=10**400), "half_life_days"),
        (lambda p: EpisodicMemory(p, reflect_timeout=True), "reflect_timeout"),
        (lambda p: EpisodicMemory(p, max_age=5), "max_age"),
        (lambda p: EpisodicMemory(p, max_age=timedelta(0)), "max_age"),
        (lambda p: EpisodicHook(EpisodicMemory(p), top_k=True), "top_k"),
        (lambda p: EpisodicHook(EpisodicMemory(p), recall_timeout="5"), "recall_timeout"),
        (lambda p: EpisodicHook(EpisodicMemory(p), max_block_chars=True), "max_block_chars"),
        (lambda p: LoopConfig(verifier=print, max_iterations=True), "max_iterations"),
        (lambda p: LoopConfig(verifier=print, target_score="0.8"), "target_score"),
    ],
)
def test_a_bad_argument_is_a_configuration_error_naming_it(make: object, name: str) -> None:
    with pytest.raises(ConfigurationError, match=name):
        make(InMemoryProvider())  # type: ignore[operator]


@pytest.mark.parametrize("top_k", [True, 1.5, -1, "3"])
async def test_recall_top_k_is_checked(provider: MemoryProvider, top_k: object) -> None:
    with pytest.raises(ConfigurationError, match="top_k"):
        await EpisodicMemory(provider).recall("q", top_k=top_k)  # type: ignore[arg-type]


# --- timestamps ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "stamp",
    [
        "9999-12-31T23:59:59-01:00",  # year 10000 in UTC
        "0001-01-01T00:00:00+01:00",  # year 0 in UTC
        "0001-01-01T00:30:00+05:00",
        "not a time",
        "2026-02-30T00:00:00Z",
    ],
)
def test_an_unrepresentable_timestamp_is_refused_on_construction(stamp: str) -> None:
    with pytest.raises(InvalidEpisodeError, match="timestamp"):
        Episode(query="q", timestamp=stamp)
    with pytest.raises(InvalidEpisodeError, match="forget_after"):
        Episode(query="q", forget_after=stamp)


async def test_a_future_timestamp_is_refused_on_record(provider: MemoryProvider) -> None:
    memory = EpisodicMemory(provider, namespace="future")
    with pytest.raises(InvalidEpisodeError, match="future"):
        await memory.record(Episode(query="q", timestamp="2999-01-01T00:00:00Z"))
    assert await memory.load() == []


@pytest.mark.parametrize(
    "stored_stamp",
    [
        "9999-12-31T23:59:59-01:00",
        "2999-01-01T00:00:00Z",  # far future
        1700000000,  # a number
        None,
        "garbled",
        "",
        ["2026-01-01"],
    ],
)
async def test_a_bad_stored_timestamp_never_crashes_and_never_makes_an_episode_immortal(
    provider: MemoryProvider, stored_stamp: object
) -> None:
    writer = EpisodicMemory(provider, namespace="stamps")
    await writer.record(
        Episode(query="refund order old", timestamp="2020-01-01T00:00:00Z", outcome="failure")
    )
    await writer.record(Episode(query="refund order placeholder"))
    await writer.record(Episode(query="refund order fresh"))
    # hand-edit the middle record's timestamp, as a damaged or foreign log would hold it
    key = "episodic:stamps:e:2"
    data = json.loads(await provider.retrieve(key) or "{}")
    data["timestamp"] = stored_stamp
    await provider.delete([key])  # an append-only store refuses to change it in place
    await provider.store(key, json.dumps(data))

    memory = EpisodicMemory(provider, namespace="stamps")
    found = await memory.recall("refund order", top_k=3)
    assert len(found) == 3
    # the fresh, dated episode ranks above the one whose time is unknown
    assert found[0].query == "refund order fresh"
    block = memory.render(found)
    assert block.count("\n- [") == 3
    # under a retention limit the undatable episode ages like the one before it: it expires
    aged = EpisodicMemory(provider, namespace="stamps", max_age=timedelta(days=365))
    assert [e.query for e in await aged.load()] == ["refund order fresh"]
    assert await aged.sweep() == 2
    assert [e.query for e in await writer.load()] == ["refund order fresh"]


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda m: m.forget(tags="pii"), "tags"),
        (lambda m: m.select(tags="pii"), "tags"),
        (lambda m: m.recall("q", tags="pii"), "tags"),
        (lambda m: m.forget(5), "ids"),
        (lambda m: m.forget([5]), "ids"),
        (lambda m: m.forget(outcome=5), "outcome"),
        (lambda m: m.recall("q", outcome=[5]), "outcome"),
        (lambda m: m.forget(containing=5), "containing"),
        (lambda m: m.forget(before=float("nan")), "before"),
        (lambda m: m.forget(before=True), "before"),
        (lambda m: m.recall("q", since=float("inf")), "since"),
        (lambda m: m.recall("q", since=b"2026-01-01"), "since"),
        (lambda m: m.forget("x", dry_run="no"), "dry_run"),
        (lambda m: m.forget(corrupt="yes"), "corrupt"),
        (lambda m: m.load(include_expired="no"), "include_expired"),
    ],
)
async def test_a_bad_filter_is_a_configuration_error_naming_it(call: object, name: str) -> None:
    # Refused before the store is asked anything: one store shows it (the store matrix
    # checks what reaches storage).
    memory = EpisodicMemory(InMemoryProvider(), namespace="filters")
    await memory.record(Episode(query="has pii", tags=["pii"]))
    await memory.record(Episode(query="has i", tags=["i"]))
    with pytest.raises(ConfigurationError, match=name):
        await call(memory)  # type: ignore[operator]
    assert len(await memory.load()) == 2  # nothing was deleted


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda p: EpisodicMemory(p, recall_fields=["query", "query"]), "recall_fields"),
        (lambda p: EpisodicMemory(p, recall_fields="query"), "recall_fields"),
        (lambda p: EpisodicMemory(p, recall_fields=["lesson"]), "recall_fields"),
        (lambda p: EpisodicMemory(p, reflect_model=5), "reflect_model"),
        (lambda p: EpisodicMemory(p, reflect_params="x"), "reflect_params"),
    ],
)
def test_bad_options_name_the_option(make: object, name: str) -> None:
    with pytest.raises(ConfigurationError, match=name):
        make(InMemoryProvider())  # type: ignore[operator]


def test_a_store_path_must_be_a_path() -> None:
    from deepcrew_episodic.providers import FileMemoryProvider, SQLiteMemoryProvider

    for make in (FileMemoryProvider, SQLiteMemoryProvider):
        with pytest.raises(ConfigurationError, match="path"):
            make(5)  # type: ignore[arg-type]


async def test_render_redacts_what_was_stored_unredacted(provider: MemoryProvider) -> None:
    """An episode stored by deepcrew-ai or with redact=False may hold a secret: the block
    never shows it."""
    key = "AKIAIOSFODNN7EXAMPLE"
    raw = EpisodicMemory(provider, namespace="unredacted", redact=False)
    await raw.record(Episode(query=f"deploy with key {key}", reflection="rotate keys"))
    memory = EpisodicMemory(provider, namespace="unredacted")
    found = await memory.recall("deploy key")
    assert key in found[0].query  # the data is returned as stored
    block, shown = memory.fit(found)
    assert key not in block
    assert "REDACTED:aws-access-key" in block
    assert [e.id for e in shown] == [found[0].id]
