"""The library is written against anyio, not asyncio: the core runs under trio too.
(The Redis provider is the exception: redis-py's client is asyncio-only.)"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from deepcrew_episodic import Episode, EpisodicMemory
from deepcrew_episodic.providers import FileMemoryProvider, InMemoryProvider, MemoryProvider

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


@pytest.fixture(params=["dict", "file"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> MemoryProvider:
    if request.param == "dict":
        return InMemoryProvider()
    return FileMemoryProvider(tmp_path / "episodes.json")


async def test_the_whole_cycle_runs_under_trio(backend: MemoryProvider) -> None:
    import trio

    assert trio.lowlevel.current_trio_token() is not None  # really on trio
    async with backend:
        memory = EpisodicMemory(backend, namespace="trio", max_episodes=50)

        async def one(i: int) -> None:
            await memory.record(Episode(query=f"deploy service {i}", response="ok"))

        async with anyio.create_task_group() as tg:
            for i in range(60):
                tg.start_soon(one, i)
        assert len(await memory.load()) == 50
        recalled = await memory.recall("deploying the service", top_k=3)
        assert len(recalled) == 3
        assert "## Relevant past experience" in memory.render(recalled)
        assert await memory.forget([recalled[0].id]) == 1
        assert len(await memory.load()) == 49
        await memory.clear()
        assert await memory.load() == []
