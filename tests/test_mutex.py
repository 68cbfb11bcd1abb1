"""The log's lock: exclusive under contention on asyncio and trio, free of the event loop when
uncontended (what lets the command line's reading commands run without one)."""

from __future__ import annotations

from collections.abc import Generator

import anyio
import anyio.lowlevel
import pytest

from deepcrew_episodic._mutex import Mutex
from deepcrew_episodic.cli._store import run_now

pytestmark = pytest.mark.anyio


def test_a_free_lock_needs_no_event_loop() -> None:
    lock = Mutex()

    async def twice() -> list[bool]:
        seen = []
        for _ in range(2):
            async with lock:
                seen.append(lock.locked())
        return seen

    assert run_now(twice()) == [True, True]
    assert not lock.locked()


class _Suspend:
    """An awaitable that gives control back to the event loop once."""

    def __await__(self) -> Generator[None, None, None]:
        yield


def test_run_now_refuses_a_coroutine_that_suspends() -> None:
    finished = []

    async def suspends() -> None:
        try:
            await _Suspend()
        finally:
            finished.append(True)

    with pytest.raises(RuntimeError, match="cannot run without an event loop"):
        run_now(suspends())
    assert finished == [True]  # closed, not left hanging


async def test_one_holder_at_a_time_in_arrival_order() -> None:
    lock = Mutex()
    inside, most, order = 0, 0, []

    async def worker(i: int) -> None:
        nonlocal inside, most
        async with lock:
            inside += 1
            most = max(most, inside)
            order.append(i)
            await anyio.sleep(0.001)  # suspend while holding it
            inside -= 1

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(worker, i)
            await anyio.lowlevel.checkpoint()  # let it arrive before the next one starts
    assert most == 1
    assert order == list(range(20))
    assert not lock.locked()


async def test_a_cancelled_waiter_leaves_the_queue() -> None:
    lock = Mutex()
    got: list[str] = []

    async def waiter(name: str, scope: anyio.CancelScope) -> None:
        with scope:
            async with lock:
                got.append(name)

    await lock.__aenter__()
    async with anyio.create_task_group() as tg:
        cancelled = anyio.CancelScope()
        tg.start_soon(waiter, "cancelled", cancelled)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(waiter, "kept", anyio.CancelScope())
        await anyio.wait_all_tasks_blocked()
        cancelled.cancel()
        await anyio.wait_all_tasks_blocked()
        assert got == []
        assert lock.locked()  # still ours
        await lock.__aexit__(None, None, None)  # goes to "kept", not to the cancelled one
    assert got == ["kept"]
    assert not lock.locked()


async def test_a_waiter_cancelled_as_the_lock_is_handed_to_it_passes_it_on() -> None:
    lock = Mutex()
    got: list[str] = []
    scopes: dict[str, anyio.CancelScope] = {}

    async def waiter(name: str) -> None:
        with anyio.CancelScope() as scope:
            scopes[name] = scope
            async with lock:
                got.append(name)

    await lock.__aenter__()
    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter, "first")
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(waiter, "second")
        await anyio.wait_all_tasks_blocked()
        # In one step: cancel "first", then hand it the lock before it can run.
        scopes["first"].cancel()
        await lock.__aexit__(None, None, None)
    # "first" was woken by its cancellation with the lock already its own: it passed the
    # lock on instead of stranding "second" behind a lock nobody holds.
    assert got == ["second"]
    assert not lock.locked()
