"""Logs written by the real deepcrew-ai 0.6.1 are read in place, and its providers work as
backends (issue: drop-in for deepcrew-ai)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

deepcrew = pytest.importorskip("deepcrew", reason="the deepcrew extra is not installed")
import deepcrew.memory as dc_memory  # noqa: E402

from deepcrew_episodic import Episode, EpisodicMemory  # noqa: E402
from deepcrew_episodic.providers import (  # noqa: E402
    FileMemoryProvider,
    InMemoryProvider,
    MemoryProvider,
)

pytestmark = pytest.mark.anyio


@dataclass
class Legacy:
    """A deepcrew-ai backend to write with, and the way we open the same data."""

    theirs: Any
    ours: MemoryProvider | Any


@pytest.fixture(params=["dict", "file", "redis", "file-via-their-provider"])
async def legacy(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Legacy]:
    kind = request.param
    if kind == "dict":
        theirs = dc_memory.InMemoryProvider()
        yield Legacy(theirs, theirs)  # the same dict object, through the adapter
    elif kind == "file":
        path = tmp_path / "episodes.json"
        yield Legacy(dc_memory.FileMemoryProvider(path), FileMemoryProvider(path))
    elif kind == "file-via-their-provider":
        path = tmp_path / "episodes.json"
        yield Legacy(dc_memory.FileMemoryProvider(path), dc_memory.FileMemoryProvider(path))
    else:
        from deepcrew_episodic.providers import RedisMemoryProvider

        url = request.getfixturevalue("clean_redis")
        theirs = dc_memory.RedisMemoryProvider(url)
        ours = RedisMemoryProvider(url)
        yield Legacy(theirs, ours)
        await theirs.aclose()
        await ours.aclose()


async def write_with_deepcrew(backend: Any, n: int, max_episodes: int) -> list[str]:
    memory = deepcrew.EpisodicMemory(backend, namespace="support", max_episodes=max_episodes)
    for i in range(n):
        await memory.record(
            deepcrew.Episode(
                query=f"refund request number {i} for order",
                response=f"answer {i}",
                outcome="success" if i % 2 else "partial",
                score=i / 10,
                tools_used=["payments"],
                tags=["billing"],
            )
        )
    return [e.query for e in await memory.load()]


@pytest.mark.parametrize(("written", "capacity"), [(3, 5), (8, 5), (5, 5), (12, 5)])
async def test_a_deepcrew_log_reads_in_place_oldest_first(
    legacy: Legacy, written: int, capacity: int
) -> None:
    theirs_view = await write_with_deepcrew(legacy.theirs, written, capacity)
    memory = EpisodicMemory(legacy.ours, namespace="support", max_episodes=capacity)
    loaded = await memory.load()
    assert [e.query for e in loaded] == theirs_view
    assert len(loaded) == min(written, capacity)
    newest = loaded[-1]
    assert newest.outcome in {"success", "partial"}
    assert newest.tools_used == ["payments"]
    assert newest.tags == ["billing"]
    assert newest.score == (written - 1) / 10
    assert newest.timestamp.endswith("Z")
    assert newest.id.startswith("dc-")  # a stable id, derived from the record
    assert [e.id for e in await EpisodicMemory(legacy.ours, namespace="support").load()][
        -1
    ] == newest.id

    recalled = await memory.recall(f"refund request number {written - 1}")
    assert recalled[0].query == f"refund request number {written - 1} for order"


async def test_new_records_append_after_the_deepcrew_episodes_and_roll_them_out(
    legacy: Legacy,
) -> None:
    theirs_view = await write_with_deepcrew(legacy.theirs, 8, 5)  # a wrapped ring
    memory = EpisodicMemory(legacy.ours, namespace="support", max_episodes=5)
    await memory.record(Episode(query="new one", response="r"))
    assert [e.query for e in await memory.load()] == [*theirs_view[1:], "new one"]
    for i in range(2, 6):
        await memory.record(Episode(query=f"new {i}", response="r"))
    fresh = EpisodicMemory(legacy.ours, namespace="support", max_episodes=5)
    assert [e.query for e in await fresh.load()] == ["new one", "new 2", "new 3", "new 4", "new 5"]
    # every deepcrew slot has been evicted like any other old episode
    leftovers = await fresh.backend.search("refund request", top_k=100)
    assert [v for _, v in leftovers if v] == []


async def test_a_bigger_ring_appends_without_evicting(legacy: Legacy) -> None:
    theirs_view = await write_with_deepcrew(legacy.theirs, 8, 5)
    memory = EpisodicMemory(legacy.ours, namespace="support", max_episodes=10)
    await memory.record(Episode(query="new one", response="r"))
    assert [e.query for e in await memory.load()] == [*theirs_view, "new one"]


async def test_clear_removes_the_deepcrew_log_too(legacy: Legacy) -> None:
    await write_with_deepcrew(legacy.theirs, 8, 5)
    memory = EpisodicMemory(legacy.ours, namespace="support", max_episodes=5)
    await memory.clear()
    assert await memory.load() == []
    found = await memory.backend.search("episodic:support:", top_k=100)
    assert [v for k, v in found if v and k.startswith("episodic:support:") and "refund" in v] == []


async def test_a_log_deepcrew_cleared_shows_nothing_and_its_stale_slots_are_cleared(
    legacy: Legacy,
) -> None:
    memory = deepcrew.EpisodicMemory(legacy.theirs, namespace="support", max_episodes=5)
    await write_with_deepcrew(legacy.theirs, 4, 5)
    await memory.clear()  # deepcrew-ai resets its index and leaves every payload behind
    ours = EpisodicMemory(legacy.ours, namespace="support", max_episodes=5)
    assert await ours.load() == []
    assert await ours.recall("refund request") == []
    await ours.clear()
    found = await ours.backend.search("refund request", top_k=100)
    assert [v for _, v in found if v] == []


@pytest.mark.parametrize("kind", ["dict", "file"])
async def test_deepcrew_providers_work_as_backends(kind: str, tmp_path: Path) -> None:
    backend = (
        dc_memory.InMemoryProvider()
        if kind == "dict"
        else dc_memory.FileMemoryProvider(tmp_path / "theirs.json")
    )
    memory = EpisodicMemory(backend, namespace="ops", max_episodes=4)
    for i in range(6):
        await memory.record(
            Episode(query=f"deploy the api step {i}", response="ok", tags=["devops"])
        )
    assert [e.query for e in await memory.load()] == [
        f"deploy the api step {i}" for i in range(2, 6)
    ]
    assert len(await memory.recall("deploying the api", top_k=10)) == 4
    await memory.clear()
    assert await memory.load() == []


async def test_deepcrew_redis_provider_works_as_a_backend(clean_redis: str) -> None:
    backend = dc_memory.RedisMemoryProvider(clean_redis, prefix="theirs:")
    memory = EpisodicMemory(backend, namespace="ops", max_episodes=4)
    for i in range(6):
        await memory.record(Episode(query=f"rotate key {i}", response="ok"))
    assert [e.query for e in await memory.load()] == [f"rotate key {i}" for i in range(2, 6)]
    await memory.clear()
    assert await memory.load() == []
    await backend.aclose()


async def test_our_dict_provider_reads_a_copied_deepcrew_dict() -> None:
    theirs = dc_memory.InMemoryProvider()
    view = await write_with_deepcrew(theirs, 7, 5)
    ours = InMemoryProvider()
    await ours.write(dict(theirs._store))
    assert [
        e.query for e in await EpisodicMemory(ours, namespace="support", max_episodes=5).load()
    ] == view


# --- a fleet half upgraded: deepcrew-ai workers and this library on one log ----------------------


async def their_record(
    legacy: Legacy, request: pytest.FixtureRequest, query: str, cap: int
) -> None:
    """One record by a deepcrew-ai 0.6.1 worker. On the file store each write is a worker of
    its own: deepcrew-ai's file provider reads the file once and writes its copy back whole,
    so a long-lived one would drop every other writer's keys (its own workers' included)."""
    backend = legacy.theirs
    if isinstance(backend, dc_memory.FileMemoryProvider):
        backend = dc_memory.FileMemoryProvider(backend._path)
    memory = deepcrew.EpisodicMemory(backend, namespace="support", max_episodes=cap)
    await memory.record(deepcrew.Episode(query=query, response="done", outcome="success"))


@pytest.mark.parametrize("start", ["theirs first", "ours first", "their ring full"])
async def test_a_half_upgraded_fleet_keeps_every_episode_visible(
    legacy: Legacy, request: pytest.FixtureRequest, start: str
) -> None:
    if request.node.callspec.params["legacy"] == "file-via-their-provider":
        pytest.skip("two deepcrew-ai file providers on one file overwrite each other")
    cap = 5 if start == "their ring full" else 50
    theirs: list[str] = []
    if start != "ours first":
        for i in range(8 if start == "their ring full" else 3):
            theirs.append(f"legacy refund ticket {i}")
            await their_record(legacy, request, theirs[-1], cap)
    reader = EpisodicMemory(legacy.ours, namespace="support", max_episodes=50)
    await reader.load()
    ours: list[str] = []
    for round_ in range(4):
        ours.append(
            [
                "rotate kafka certificates",
                "resize postgres volume",
                "purge cdn cache",
                "renew vault lease",
            ][round_]
        )
        await EpisodicMemory(legacy.ours, namespace="support", max_episodes=50).record(
            Episode(query=ours[-1], response="done", outcome="success")
        )
        for j in range(round_ % 3 + 1):
            theirs.append(f"old worker refund job {round_} {j}")
            await their_record(legacy, request, theirs[-1], cap)
        await reader.load()  # a reader that stays up through the upgrade
    kept_theirs = theirs[-cap:]  # deepcrew-ai's own ring keeps its newest
    expected = {*ours, *kept_theirs}
    for memory in (reader, EpisodicMemory(legacy.ours, namespace="support", max_episodes=50)):
        shown = [e.query for e in await memory.load()]
        assert set(shown) == expected
        assert len(shown) == len(expected)
        assert (await memory.stats()).total == len(expected)
        for query in ours:
            assert query in [e.query for e in await memory.recall(query, top_k=3)]
        assert memory.counters.corrupt_records == 0
    # and deepcrew-ai's workers still read their own ring
    mine = deepcrew.EpisodicMemory(legacy.theirs, namespace="support", max_episodes=cap)
    if not isinstance(legacy.theirs, dc_memory.FileMemoryProvider):
        assert [e.query for e in await mine.load()] == kept_theirs


@pytest.mark.parametrize("adopted", [False, True])
@pytest.mark.parametrize("counter", ["3", "17", "1000"])
async def test_no_counter_of_ours_hides_or_sweeps_a_deepcrew_episode(
    legacy: Legacy, adopted: bool, counter: str
) -> None:
    """Our counter edited below deepcrew-ai's episodes, or a whole ring past them (by hand,
    or a key restored from another log), on a log deepcrew-ai wrote: every one of its
    episodes stays visible, no sweep deletes one, and the next record goes after them."""
    theirs_view = await write_with_deepcrew(legacy.theirs, 5, 20)
    ours = ["rotate kafka certificates"] if adopted else []
    if adopted:
        await EpisodicMemory(legacy.ours, namespace="support", max_episodes=10).record(
            Episode(query=ours[0], response="done")
        )
    await legacy.ours.store("episodic:support:__seq__", counter)
    expected = [*theirs_view, *ours]
    for size in (10, 3):
        memory = EpisodicMemory(legacy.ours, namespace="support", max_episodes=size)
        assert [e.query for e in await memory.load()] == expected[-size:]
    assert await EpisodicMemory(legacy.ours, namespace="support", max_episodes=10).sweep() == 0
    await EpisodicMemory(legacy.ours, namespace="support", max_episodes=10).record(
        Episode(query="purge cdn cache", response="done")
    )
    memory = EpisodicMemory(legacy.ours, namespace="support", max_episodes=10)
    assert [e.query for e in await memory.load()] == [*expected, "purge cdn cache"]
    again = deepcrew.EpisodicMemory(legacy.theirs, namespace="support", max_episodes=20)
    assert [e.query for e in await again.load()][: len(theirs_view)] == theirs_view
