"""The episode log under the conditions a review found hard: writers racing a sweep, a
cancelled sync, a log re-created under a reader, a fork, concurrent repairs, rings of different
sizes, symlinks, re-recorded ids."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
from collections.abc import Sequence
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from deepcrew_episodic import Episode, EpisodicMemory, InvalidEpisodeError
from deepcrew_episodic.providers import FileMemoryProvider, InMemoryProvider, MemoryProvider

pytestmark = pytest.mark.anyio


def ep(query: str, **fields: object) -> Episode:
    return Episode(query=query, response="r", **fields)  # type: ignore[arg-type]


async def test_sweep_racing_writers_deletes_nothing_live(provider: MemoryProvider) -> None:
    writer = EpisodicMemory(provider, namespace="race", max_episodes=1000)
    sweeper = EpisodicMemory(provider, namespace="race", max_episodes=1000)
    deleted = 0
    done = anyio.Event()

    async def write() -> None:
        for i in range(150):
            await writer.record(ep(f"task {i}"))
        done.set()

    async def sweep() -> None:
        nonlocal deleted
        while not done.is_set():
            deleted += await sweeper.sweep()
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(write)
        tg.start_soon(sweep)
    assert deleted == 0
    assert len(await EpisodicMemory(provider, namespace="race", max_episodes=1000).load()) == 150


class SlowReads(InMemoryProvider):
    """A real dict provider whose batch reads take a while (a slow network)."""

    slow = False

    async def retrieve_many(self, keys: Sequence[str]) -> list[str | None]:
        values = await super().retrieve_many(keys)
        if self.slow:
            await anyio.sleep(0.2)
        return values


async def test_a_cancelled_recall_leaves_recall_and_load_in_step() -> None:
    provider = SlowReads()
    writer = EpisodicMemory(provider, namespace="c", max_episodes=3)
    reader = EpisodicMemory(provider, namespace="c", max_episodes=3)
    for i in range(3):
        await writer.record(ep(f"deploy step {i}"))
    assert len(await reader.recall("deploy", top_k=10)) == 3
    for i in range(3, 5):
        await writer.record(ep(f"deploy step {i}"))
    provider.slow = True
    with anyio.move_on_after(0.05):  # like the hook's recall timeout
        await reader.recall("deploy", top_k=10)
    provider.slow = False
    recalled = {e.query for e in await reader.recall("deploy", top_k=10)}
    loaded = {e.query for e in await reader.load()}
    assert recalled == loaded == {"deploy step 2", "deploy step 3", "deploy step 4"}


async def test_a_log_re_created_under_a_warm_reader_is_seen(provider: MemoryProvider) -> None:
    writer = EpisodicMemory(provider, namespace="again")
    reader = EpisodicMemory(provider, namespace="again")
    for i in range(3):
        await writer.record(ep(f"old secret {i}"))
    assert len(await reader.recall("old secret")) == 3
    await provider.clear()  # the whole store wiped (a deleted file, FLUSHDB, a restore)
    fresh = EpisodicMemory(provider, namespace="again")
    for i in range(5):
        await fresh.record(ep(f"new thing {i}"))
    assert await reader.recall("old secret") == []
    assert [e.query for e in await reader.load()] == [f"new thing {i}" for i in range(5)]


async def test_concurrent_repairs_of_a_corrupt_counter_reuse_no_sequence_number(
    provider: MemoryProvider,
) -> None:
    seed = EpisodicMemory(provider, namespace="rep", max_episodes=1000)
    for i in range(5):
        await seed.record(ep(f"before {i}"))
    await provider.store("episodic:rep:__seq__", "garbage")
    writers = [EpisodicMemory(provider, namespace="rep", max_episodes=1000) for _ in range(4)]

    async def write(w: int, memory: EpisodicMemory) -> None:
        for i in range(5):
            await memory.record(ep(f"writer {w} item {i}"))

    async with anyio.create_task_group() as tg:
        for w, memory in enumerate(writers):
            tg.start_soon(write, w, memory)
    loaded = await EpisodicMemory(provider, namespace="rep", max_episodes=1000).load()
    assert len(loaded) == 25
    assert len({e.id for e in loaded}) == 25


async def test_a_smaller_writer_ring_is_honoured_by_a_warm_larger_reader(
    provider: MemoryProvider,
) -> None:
    reader = EpisodicMemory(provider, namespace="rings", max_episodes=10)
    small = EpisodicMemory(provider, namespace="rings", max_episodes=3)
    for i in range(5):
        await small.record(ep(f"q{i}"))
    assert [e.query for e in await reader.load()] == ["q2", "q3", "q4"]
    for i in range(5, 8):
        await small.record(ep(f"q{i}"))
    warm = [e.query for e in await reader.load()]
    cold = [
        e.query for e in await EpisodicMemory(provider, namespace="rings", max_episodes=10).load()
    ]
    assert warm == cold == ["q5", "q6", "q7"]


async def test_forget_also_deletes_copies_outside_the_ring(provider: MemoryProvider) -> None:
    big = EpisodicMemory(provider, namespace="acme", max_episodes=10)
    for i in range(10):
        await big.record(ep(f"acme corp ticket {i}"))
    small = EpisodicMemory(provider, namespace="acme", max_episodes=3)
    await small.record(ep("unrelated"))  # evicts ticket 0 by the log's ring of 10
    # forget acts on the whole log, not only on the 3 episodes the smaller memory shows
    assert await small.forget(containing="acme corp") == 9
    values = await provider.retrieve_many(await provider.keys("episodic:acme:"))
    assert not any("acme corp" in (v or "") for v in values)
    assert [e.query for e in await big.load()] == ["unrelated"]


async def test_recording_an_id_that_is_already_stored_is_refused(provider: MemoryProvider) -> None:
    memory = EpisodicMemory(provider, namespace="ids")
    stored = await memory.record(ep("once"))
    with pytest.raises(InvalidEpisodeError, match=stored.id):
        await memory.record(stored)
    assert [e.id for e in await memory.load()] == [stored.id]
    copy = await memory.record(dataclasses.replace(stored, id=""))
    assert copy.id != stored.id
    imported = await memory.record(ep("imported", id="given-by-an-export"))
    assert imported.id == "given-by-an-export"


async def test_a_corrupt_record_is_counted_once_across_reloads(provider: MemoryProvider) -> None:
    memory = EpisodicMemory(provider, namespace="once")
    kept = [await memory.record(ep(f"item {i}")) for i in range(4)]
    await provider.delete(["episodic:once:e:2"])  # append-only stores refuse to change it
    await provider.write({"episodic:once:e:2": "{broken"})
    await memory.load()
    for episode in (kept[0], kept[3]):  # each forget makes every reader reload
        assert await memory.forget([episode.id]) == 1
        assert [e.query for e in await memory.load()] == (
            ["item 2", "item 3"] if episode is kept[0] else ["item 2"]
        )
    assert memory.counters.corrupt_records == 1


async def test_one_bad_field_does_not_hide_a_deepcrew_record(provider: MemoryProvider) -> None:
    await provider.write(
        {
            "episodic:lenient:0": json.dumps(
                {
                    "query": "rotate the key",
                    "response": "done",
                    "outcome": "exploded",  # from a newer writer
                    "score": "high",
                }
            ),
            "episodic:lenient:__meta__": json.dumps({"count": 1, "next": 1}),
        }
    )
    memory = EpisodicMemory(provider, namespace="lenient")
    (episode,) = await memory.load()
    assert (episode.query, episode.outcome, episode.score) == ("rotate the key", "unknown", None)
    assert memory.counters.corrupt_records == 0


async def test_a_garbled_deadline_hides_the_record(provider: MemoryProvider) -> None:
    memory = EpisodicMemory(provider, namespace="deadline")
    await memory.record(ep("visible"))
    await provider.write(
        {"episodic:deadline:e:2": json.dumps({"query": "secret", "forget_after": "soon"})}
    )
    await provider.store("episodic:deadline:__seq__", "2")
    fresh = EpisodicMemory(provider, namespace="deadline")
    assert [e.query for e in await fresh.load()] == ["visible"]
    assert fresh.counters.corrupt_records == 1


async def test_a_symlinked_file_store_keeps_its_link(tmp_path: Path) -> None:
    target = tmp_path / "real" / "episodes.json"
    target.parent.mkdir()
    link = tmp_path / "episodes.json"
    link.symlink_to(target)
    async with FileMemoryProvider(link) as provider:
        await EpisodicMemory(provider).record(ep("through the link"))
    assert link.is_symlink()
    assert "through the link" in target.read_text()


def _record_in_child(provider: FileMemoryProvider, label: str, n: int) -> None:
    async def main() -> None:
        memory = EpisodicMemory(provider, namespace="fork", max_episodes=1000)
        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(memory.record, ep(f"{label} {i}"))

    anyio.run(main)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
async def test_a_file_provider_shared_across_fork_loses_nothing(tmp_path: Path) -> None:
    provider = FileMemoryProvider(tmp_path / "forked.json")
    memory = EpisodicMemory(provider, namespace="fork", max_episodes=1000)
    await memory.record(ep("parent first"))  # the parent holds an open lock file now
    ctx = multiprocessing.get_context("fork")
    children = [
        ctx.Process(target=_record_in_child, args=(provider, f"child{c}", 50)) for c in range(4)
    ]

    def start_all() -> None:  # forked from a worker thread: the child has no running loop
        for child in children:
            child.start()

    await anyio.to_thread.run_sync(start_all)
    await memory.record(ep("parent meanwhile"))
    for child in children:
        await anyio.to_thread.run_sync(child.join)
        assert child.exitcode == 0
    loaded = await EpisodicMemory(
        FileMemoryProvider(tmp_path / "forked.json"), namespace="fork", max_episodes=1000
    ).load()
    assert len(loaded) == 202
