"""Several processes on one store: concurrent writers, claims, lost updates and SIGKILL."""

from __future__ import annotations

import random
import signal
from typing import ClassVar

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from .. import EpisodicMemory
from ..providers import MemoryProvider
from ._capability import Capability, ep, slow
from ._episode_log import assert_the_newest_are_kept
from ._store import StoreSpec, worker

__all__ = ["MultiProcess"]


class MultiProcess(Capability):
    """The same store opened by several worker processes at once: 8 writers, mixed rings, one
    winner per claimed key, no lost update, and a writer killed with SIGKILL mid-record. Run when
    the provider declares ``shared_across_processes``; the ``store`` must then be picklable.

    Override :meth:`check_after_crashes` to add what only your store can check after the
    SIGKILL test (no temporary files left, say).
    """

    capability: ClassVar[str] = "multi-process"
    declared_by: ClassVar[str | None] = "shared_across_processes"

    #: How many times the SIGKILL test kills a writer (about 0.3 s each).
    sigkill_rounds: ClassVar[int] = 10

    def check_after_crashes(self, store: StoreSpec) -> None:
        """Called after the SIGKILL test's rounds, with the store closed."""

    @slow
    @pytest.mark.parametrize("max_episodes", [2000, 150])
    async def test_concurrent_records_from_many_processes(
        self, store: StoreSpec, provider: MemoryProvider, max_episodes: int
    ) -> None:
        await _run_workers(
            [worker(store, "record", "procs", max_episodes, 200, f"w{p}") for p in range(8)]
        )
        async with store.open() as fresh:
            episodes = await EpisodicMemory(
                fresh, namespace="procs", max_episodes=max_episodes
            ).load()
            await assert_the_newest_are_kept(fresh, "procs", 1600, min(1600, max_episodes))
        assert len(episodes) == min(1600, max_episodes)
        assert len({e.id for e in episodes}) == len(episodes)
        if max_episodes >= 1600:
            expected = {(f"w{p}", i) for p in range(8) for i in range(200)}
            assert {(e.tags[0], int(e.query.split()[3])) for e in episodes} == expected

    @slow
    async def test_mixed_rings_from_many_processes_lose_nothing(
        self, store: StoreSpec, provider: MemoryProvider
    ) -> None:
        await EpisodicMemory(provider, namespace="mixed", max_episodes=2000).record(ep("first"))
        rings = [2000, 7, 2000, 30]
        await _run_workers(
            [worker(store, "record", "mixed", r, 60, f"w{i}") for i, r in enumerate(rings)]
        )
        async with store.open() as fresh:
            episodes = await EpisodicMemory(fresh, namespace="mixed", max_episodes=2000).load()
        assert len(episodes) == 1 + 60 * len(rings)

    @slow
    async def test_sigkill_mid_record_never_leaves_an_unreadable_log(
        self, store: StoreSpec, provider: MemoryProvider
    ) -> None:
        await provider.aclose()
        rng = random.Random(7)
        total_seen = 0
        for round_ in range(self.sigkill_rounds):
            command, env = worker(store, "record", "crash", 40, 0, f"k{round_}", "forever")
            async with await anyio.open_process(command, env=env) as child:
                assert child.stdout is not None
                assert child.stderr is not None
                if await _line(BufferedByteReceiveStream(child.stdout)) != b"ready":
                    err = b"".join([chunk async for chunk in child.stderr])
                    pytest.fail(f"the worker did not start: {err.decode()[-2000:]}")
                await anyio.sleep(rng.uniform(0.005, 0.08))
                child.send_signal(signal.SIGKILL)
                await child.wait()
            async with store.open() as fresh:
                memory = EpisodicMemory(fresh, namespace="crash", max_episodes=40)
                episodes = await memory.load()  # must not raise
                assert memory.counters.corrupt_records == 0
                assert memory.counters.recovered_indexes == 0
                for e in episodes:  # each one whole: a worker's or one of ours
                    assert e.id
                    assert e.timestamp
                    expected = "ok" if e.query.startswith("after kill") else "x" * 300
                    assert e.response == expected
                total_seen = max(total_seen, len(episodes))
                # and the log stays writable
                await memory.record(ep(f"after kill {round_}"))
        assert total_seen > 0
        self.check_after_crashes(store)

    @slow
    async def test_write_if_has_exactly_one_winner_among_processes(
        self, store: StoreSpec, provider: MemoryProvider
    ) -> None:
        procs, keys = 6, 40
        # Every worker connects, then all start claiming at once. Half go up the keys and half
        # down: several processes race for every key, and more than one wins some.
        outputs = await _run_workers(
            [
                worker(store, "claim", keys, f"p{p}", "up" if p % 2 else "down")
                for p in range(procs)
            ],
            together=True,
        )
        won: dict[int, list[str]] = {i: [] for i in range(keys)}
        for p, out in enumerate(outputs):
            for line in out.split():
                won[int(line)].append(f"p{p}")
        assert all(len(winners) == 1 for winners in won.values()), won
        stored = await provider.retrieve_many([f"claim:{i}" for i in range(keys)])
        assert stored == [won[i][0] for i in range(keys)]
        assert len({w[0] for w in won.values()}) > 1  # they did race: several processes won

    @slow
    async def test_increment_and_write_never_writes_on_stale_reads_across_processes(
        self, store: StoreSpec, provider: MemoryProvider
    ) -> None:
        procs, each = 4, 50
        await _run_workers([worker(store, "bump", each) for _ in range(procs)], together=True)
        total = str(procs * each)
        assert await provider.retrieve_many(["episodic:bump:seq", "episodic:bump:total"]) == [
            total,
            total,
        ]


async def _run_workers(
    commands: list[tuple[list[str], dict[str, str]]], *, together: bool = False
) -> list[bytes]:
    """Run every worker to its end; return their outputs. *together*: each worker prints
    "ready" once connected, and all are told to start when all are ready."""
    outputs: dict[int, bytes] = {}
    failures: dict[int, str] = {}
    ready = [anyio.Event() for _ in commands]
    go = anyio.Event()

    async def run(i: int, command: list[str], env: dict[str, str]) -> None:
        errors: list[bytes] = []
        async with await anyio.open_process(command, env=env) as child:
            assert child.stdin is not None
            assert child.stdout is not None
            assert child.stderr is not None
            stderr, out = child.stderr, BufferedByteReceiveStream(child.stdout)
            async with anyio.create_task_group() as tg:

                async def drain() -> None:
                    errors.extend([chunk async for chunk in stderr])

                tg.start_soon(drain)
                if together:
                    if await _line(out) == b"ready":
                        ready[i].set()
                        await go.wait()
                        await child.stdin.send(b"go\n")
                    else:
                        go.set()  # the others must not wait for this one
                outputs[i] = b"".join([chunk async for chunk in out])
            code = await child.wait()
            if code:
                failures[i] = f"exit status {code}: {b''.join(errors).decode()[-2000:]}"
            ready[i].set()

    async with anyio.create_task_group() as tg:
        for i, (command, env) in enumerate(commands):
            tg.start_soon(run, i, command, env)
        for event in ready:
            await event.wait()
        go.set()
    assert not any(failures.values()), failures
    return [outputs[i] for i in range(len(commands))]


async def _line(stream: BufferedByteReceiveStream) -> bytes:
    try:
        return (await stream.receive_until(b"\n", 99)).strip()
    except (anyio.EndOfStream, anyio.IncompleteRead, anyio.DelimiterNotFound):
        return b""
