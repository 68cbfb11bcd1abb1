"""The library is written against anyio, not asyncio: every async test runs on asyncio and on
trio (the ``anyio_backend`` fixture in ``tests/conftest.py``). redis-py and litellm are
asyncio-only, so the redis and cluster stores and the scripted model skip on trio there."""

from __future__ import annotations

import asyncio

import anyio
import pytest
from stores import Store

from deepcrew_episodic import Episode, EpisodicMemory

pytestmark = pytest.mark.anyio


async def test_the_test_runs_on_the_backend_it_is_parametrized_with(anyio_backend: str) -> None:
    if anyio_backend == "trio":
        import trio

        assert trio.lowlevel.current_trio_token() is not None
        with pytest.raises(RuntimeError):
            asyncio.get_running_loop()
    else:
        assert anyio_backend == "asyncio"
        assert asyncio.get_running_loop() is not None


async def test_the_whole_cycle_runs_on_every_backend(store: Store) -> None:
    async with store.open() as provider:
        memory = EpisodicMemory(provider, namespace="cycle", max_episodes=50)

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
