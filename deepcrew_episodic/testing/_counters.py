"""Atomic counters: increment and increment_and_write, alone and under concurrency."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import anyio
import pytest

from .. import CorruptDataError
from ..providers import MemoryProvider
from ._capability import Capability

__all__ = ["AtomicCounters"]


class AtomicCounters(Capability):
    """A counter starts at ``initial``, counts once per call among concurrent tasks, refuses or
    repairs what is not a count; ``increment_and_write`` applies ``then`` to the values it read
    (``read``, ``fresh``) and never on stale ones; a compare-and-set has one winner among tasks.
    Required of every provider.
    """

    capability: ClassVar[str] = "atomic counters"

    async def test_increment_starts_at_initial_and_is_atomic(
        self, provider: MemoryProvider
    ) -> None:
        assert await provider.increment("n", initial=41) == 42
        assert await provider.increment("n", initial=1000) == 43  # initial only applies once
        results: list[int] = []

        async def bump() -> None:
            results.append(await provider.increment("m"))

        async with anyio.create_task_group() as tg:
            for _ in range(200):
                tg.start_soon(bump)
        assert sorted(results) == list(range(1, 201))

    @pytest.mark.parametrize("raw", ["-1", "\u0663", " 7", "7 ", "1e3", "9" * 19, "abc"])
    async def test_a_counter_that_is_not_ascii_digits_is_corrupt_or_repaired_in_one_step(
        self, provider: MemoryProvider, raw: str
    ) -> None:
        key = "episodic:ctr:__seq__"
        await provider.store(key, raw)
        with pytest.raises(CorruptDataError):
            await provider.increment_and_write(key, lambda s, v: ({"episodic:ctr:e": "x"}, []))
        assert await provider.retrieve_many([key, "episodic:ctr:e"]) == [raw, None]
        assert await provider.increment(key, repair=41) == 42
        assert await provider.increment(key, repair=0) == 43  # repaired once, then counted
        await provider.store(key, "")
        assert await provider.increment(key, initial=9) == 10  # "" counts as absent

    async def test_write_if_has_exactly_one_winner_among_tasks(
        self, provider: MemoryProvider
    ) -> None:
        wins: list[str] = []

        async def claim(me: str) -> None:
            if await provider.write_if(
                {"episodic:claim:id": None},
                {"episodic:claim:id": me, f"episodic:claim:by:{me}": "1"},
            ):
                wins.append(me)

        async with anyio.create_task_group() as tg:
            for i in range(50):
                tg.start_soon(claim, f"t{i}")
        assert len(wins) == 1
        assert await provider.retrieve("episodic:claim:id") == wins[0]
        assert await provider.keys("episodic:claim:by:") == [f"episodic:claim:by:{wins[0]}"]

    async def test_increment_and_write_applies_then_to_the_values_it_read(
        self, provider: MemoryProvider
    ) -> None:
        seen: list[tuple[int, dict[str, str | None]]] = []

        def then(seq: int, values: Mapping[str, str | None]) -> tuple[dict[str, str], list[str]]:
            seen.append((seq, dict(values)))
            return {f"episodic:read:e:{seq}": values["episodic:read:max"] or "none"}, [
                f"episodic:read:e:{seq - 1}"
            ]

        await provider.store("episodic:read:max", "10")
        read = ["episodic:read:max"]
        assert (
            await provider.increment_and_write("episodic:read:seq", then, initial=4, read=read) == 5
        )
        assert (
            await provider.increment_and_write(
                "episodic:read:seq", then, read=["episodic:read:max", "episodic:read:absent"]
            )
            == 6
        )
        assert seen == [
            (5, {"episodic:read:max": "10"}),
            (6, {"episodic:read:max": "10", "episodic:read:absent": None}),
        ]
        assert await provider.keys("episodic:read:e:") == ["episodic:read:e:6"]
        assert await provider.retrieve_many(["episodic:read:e:6", "episodic:read:seq"]) == [
            "10",
            "6",
        ]

    async def test_increment_and_write_never_writes_on_stale_reads_under_concurrency(
        self, provider: MemoryProvider
    ) -> None:
        # Every call adds one to a total it read: a write based on a value another task
        # changed in between would lose an update.
        async with anyio.create_task_group() as tg:
            for _ in range(100):
                tg.start_soon(_bump, provider)
        assert await provider.retrieve_many(["episodic:bump:seq", "episodic:bump:total"]) == [
            "100",
            "100",
        ]
        assert len(await provider.keys("episodic:bump:e:")) == 100

    async def test_increment_and_write_reads_the_keys_the_new_value_names(
        self, provider: MemoryProvider
    ) -> None:
        """``fresh(value)`` names the record a new counter value would write: ``then`` sees it
        as stored, so a counter that fell behind its records can never overwrite one."""
        seen: list[tuple[int, dict[str, str | None]]] = []

        class Taken(Exception):
            pass

        def then(seq: int, values: Mapping[str, str | None]) -> tuple[dict[str, str], list[str]]:
            seen.append((seq, dict(values)))
            if values[f"episodic:fr:e:{seq}"]:
                raise Taken(seq)
            return {f"episodic:fr:e:{seq}": "new"}, []

        def fresh(seq: int) -> list[str]:
            return [f"episodic:fr:e:{seq}"]

        await provider.write({"episodic:fr:seq": "2", "episodic:fr:e:3": "stored"})
        with pytest.raises(Taken):
            await provider.increment_and_write("episodic:fr:seq", then, fresh=fresh)
        assert seen[-1] == (3, {"episodic:fr:e:3": "stored"})
        assert await provider.retrieve_many(["episodic:fr:e:3"]) == ["stored"]
        assert await provider.keys("episodic:fr:e:") == ["episodic:fr:e:3"]
        await provider.write({"episodic:fr:seq": "3"})
        read = ["episodic:fr:max"]
        assert (
            await provider.increment_and_write("episodic:fr:seq", then, read=read, fresh=fresh) == 4
        )
        assert seen[-1] == (4, {"episodic:fr:max": None, "episodic:fr:e:4": None})
        assert await provider.retrieve_many(["episodic:fr:e:3", "episodic:fr:e:4"]) == [
            "stored",
            "new",
        ]


def _plus_one(seq: int, values: Mapping[str, str | None]) -> tuple[dict[str, str], list[str]]:
    return {
        "episodic:bump:total": str(int(values["episodic:bump:total"] or 0) + 1),
        f"episodic:bump:e:{seq}": "x",
    }, []


async def _bump(provider: MemoryProvider) -> None:
    await provider.increment_and_write("episodic:bump:seq", _plus_one, read=["episodic:bump:total"])
