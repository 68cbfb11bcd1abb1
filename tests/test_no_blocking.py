"""The blocking-call check of ``tests/conftest.py`` works: a blocking call made on the event
loop's thread from inside the library fails the test, on asyncio and on trio; the library's
I/O in worker threads, a test's own blocking setup and synchronous tests are not flagged."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from blockbuster import BlockingError

from deepcrew_episodic import Episode, EpisodicMemory
from deepcrew_episodic.providers import InMemoryProvider, SQLiteMemoryProvider

pytestmark = pytest.mark.anyio


def sleepy_clock() -> Callable[[], float]:
    """A clock that blocks: the library calls it on the loop's thread."""

    def clock() -> float:
        time.sleep(0.001)
        return time.time()

    return clock


async def test_a_blocking_call_inside_the_library_fails_on_every_backend() -> None:
    memory = EpisodicMemory(InMemoryProvider(), namespace="b", clock=sleepy_clock())
    with pytest.raises(BlockingError, match=r"time\.sleep"):
        await memory.record(Episode(query="q"))


async def test_the_librarys_own_io_in_worker_threads_passes(tmp_path: Path) -> None:
    async with SQLiteMemoryProvider(tmp_path / "episodes.db") as provider:
        memory = EpisodicMemory(provider, namespace="b")
        await memory.record(Episode(query="q"))
        assert [e.query for e in await memory.load()] == ["q"]


async def test_a_tests_own_blocking_call_is_not_the_librarys() -> None:
    # Only calls with a frame of deepcrew_episodic on the stack are checked: a test's own
    # setup (writing a file, a synchronous redis client) may block.
    time.sleep(0.001)
    await anyio.to_thread.run_sync(time.sleep, 0.001)


def test_a_synchronous_test_is_not_checked() -> None:
    memory = EpisodicMemory(InMemoryProvider(), namespace="b", clock=sleepy_clock())
    anyio.run(memory.record, Episode(query="q"))
