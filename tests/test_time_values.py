"""Values of the right type that name no time anyone means are refused as the same text would
be: a ``timedelta`` that is not positive (``"-3d"`` is refused; ``before=timedelta(days=-90)``
would otherwise mean "before three months from now", every episode), and POSIX seconds or a
duration outside the years a time can hold (milliseconds given as seconds)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from deepcrew_episodic import ConfigurationError, Episode, EpisodicMemory, parse_time
from deepcrew_episodic.providers import InMemoryProvider

NOW = 1_796_200_000.0  # December 2026


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (timedelta(days=-90), "a duration must be positive"),
        (timedelta(0), "a duration must be positive"),
        ("-90d", "is not a time"),
        (1.7e12, "out of range"),  # milliseconds, as JavaScript's Date.now() gives them
        (-1e12, "out of range"),
        (10**20, "out of range"),
        (10**400, "finite number"),
        (timedelta(days=999_999_999), "out of range"),
    ],
)
def test_a_value_that_names_no_time_is_refused(value: Any, words: str) -> None:
    with pytest.raises(ConfigurationError, match=words):
        parse_time(value, now=NOW)


@pytest.mark.anyio
async def test_forget_before_a_negative_timedelta_deletes_nothing() -> None:
    memory = EpisodicMemory(InMemoryProvider(), clock=lambda: NOW)
    await memory.record(Episode(query="rotate the key", response="failed", outcome="failure"))
    with pytest.raises(ConfigurationError, match=r"before: .*a duration must be positive"):
        await memory.forget(outcome="failure", before=timedelta(days=-90))
    assert len(await memory.load()) == 1
    # A moment in range, a positive duration: as before.
    assert await memory.forget(outcome="failure", before=timedelta(days=90), dry_run=True) == 0
    assert parse_time(0) == (0.0, 0.0)
