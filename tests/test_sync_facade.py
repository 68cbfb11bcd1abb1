"""SyncEpisodicMemory: the async memory, called without ``await``, on every provider."""

from __future__ import annotations

import subprocess
import sys
import threading
from datetime import timedelta

import pytest
from stores import Store

from deepcrew_episodic import (
    ConfigurationError,
    Episode,
    EpisodicMemory,
    InvalidEpisodeError,
    SyncEpisodicMemory,
)
from deepcrew_episodic.providers import InMemoryProvider


def test_every_operation_without_await(store: Store) -> None:
    with SyncEpisodicMemory(store.open(), namespace="sync", max_episodes=50) as memory:
        stored = memory.record(
            Episode(query="Rotate the billing API key", response="Done", outcome="success")
        )
        memory.record(Episode(query="Deploy the search service", outcome="failure"))
        assert [e.id for e in memory.recall("rotate the API key")] == [stored.id]
        assert memory.explain("deploy search")[0].episode.outcome == "failure"
        assert memory.render(memory.recall("rotate key")).startswith("## Relevant past experience")
        assert len(memory.load()) == 2
        assert memory.stats().total == 2
        with pytest.raises(InvalidEpisodeError):  # errors cross the thread unchanged
            memory.record(Episode(query="again", id=stored.id))
        assert [e.id for e in memory.select(containing="billing")] == [stored.id]
        assert not memory.is_expired(stored)
        assert memory.forget(stored.id, dry_run=True) == 1
        assert memory.forget(stored.id) == 1
        assert memory.sweep() == 0
        memory.record(Episode(query="three"))
        assert memory.shrink(1) == 1
        memory.clear()
        assert memory.load() == []
    with pytest.raises(ConfigurationError, match="closed"):
        memory.load()
    memory.close()  # idempotent


def test_it_wraps_an_existing_memory_and_refuses_options_then() -> None:
    inner = EpisodicMemory(InMemoryProvider(), namespace="wrapped", max_age=timedelta(days=1))
    with SyncEpisodicMemory(inner) as memory:
        assert memory.memory is inner
        assert memory.max_age == timedelta(days=1)
    with pytest.raises(ConfigurationError, match="recall_k"):
        SyncEpisodicMemory(inner, recall_k=2)


def test_it_runs_on_trio_too() -> None:
    with SyncEpisodicMemory(InMemoryProvider(), backend_name="trio") as memory:
        memory.record(Episode(query="on trio"))
        assert [e.query for e in memory.recall("trio")] == ["on trio"]


def test_it_works_inside_a_running_event_loop() -> None:
    """A notebook cell runs inside an event loop; the facade keeps its own in a thread."""
    import anyio

    async def cell() -> list[Episode]:
        with SyncEpisodicMemory(InMemoryProvider()) as memory:
            memory.record(Episode(query="from a notebook"))
            return memory.load()

    assert [e.query for e in anyio.run(cell)] == ["from a notebook"]


def test_the_loop_thread_stops_on_close_and_never_blocks_exit() -> None:
    before = threading.active_count()
    memory = SyncEpisodicMemory(InMemoryProvider())
    assert threading.active_count() == before + 1
    memory.close()
    assert threading.active_count() == before
    # a memory never closed does not keep the interpreter alive
    code = (
        "from deepcrew_episodic import Episode, SyncEpisodicMemory\n"
        "from deepcrew_episodic.providers import InMemoryProvider\n"
        "m = SyncEpisodicMemory(InMemoryProvider()); m.record(Episode(query='q')); print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == b"ok"


def test_open_namespaces_counters_and_check(store: Store) -> None:
    with SyncEpisodicMemory(store.open(), namespace="ring7", max_episodes=7) as writer:
        for i in range(9):
            writer.record(Episode(query=f"task {i}"))
        assert writer.namespaces() == ["ring7"]
        assert writer.counters.corrupt_records == 0
        assert writer.backend is writer.memory.backend
        with pytest.raises(InvalidEpisodeError, match="secret"):
            writer.check(Episode(query="q", id="AKIAIOSFODNN7EXAMPLE"))
    if store.kind == "dict":
        return  # a dict store lives and dies with its provider
    with SyncEpisodicMemory.open(store.open(), namespace="ring7") as opened:
        assert opened.max_episodes == 7
        assert len(opened.load()) == 7


def test_the_sync_facade_grades_counts_uses_and_refreshes() -> None:
    from deepcrew_episodic.providers import InMemoryProvider

    with SyncEpisodicMemory(InMemoryProvider()) as memory:
        before = memory.refresh()
        episode = memory.record(Episode(query="rotate the signing key"))
        assert memory.refresh() > before
        memory.grade(episode.id, outcome="success", note="confirmed")
        assert [g.outcome for g in memory.grades(episode.id)] == ["success"]
        assert [e.outcome for e in memory.load()] == ["success"]
        assert [e.outcome for e in memory.load(graded=False)] == ["unknown"]
        memory.used([episode.id])
        assert memory.stats().most_used == [(episode.id, 1)]
