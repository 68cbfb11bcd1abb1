"""Values of the right type that name no time anyone means are refused as the same text would
be: a ``timedelta`` that is not positive (``"-3d"`` is refused; ``before=timedelta(days=-90)``
would otherwise mean "before three months from now", every episode), and POSIX seconds or a
duration outside the years a time can hold (milliseconds given as seconds)."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import anyio.to_thread
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


def test_a_pytz_zone_reads_as_the_same_zone_by_name() -> None:
    # pytz (dateparser's own dependency) zones are tzinfos whose offset, given to datetime(),
    # is the zone's first one (Paris: +00:09, its mean solar time of 1891).
    pytz = pytest.importorskip("pytz")
    for value in ["yesterday", "2026-03-01", "2026-03-01T09:30", "2026-07"]:
        expected = parse_time(value, tz="Europe/Paris", now=NOW)
        assert parse_time(value, tz=pytz.timezone("Europe/Paris"), now=NOW) == expected


@pytest.mark.anyio
async def test_a_memory_in_a_pytz_zone_reads_days_in_it() -> None:
    pytz = pytest.importorskip("pytz")
    tokyo = await anyio.to_thread.run_sync(pytz.timezone, "Asia/Tokyo")  # it reads a file
    memory = EpisodicMemory(InMemoryProvider(), tz=tokyo, clock=lambda: NOW)
    await memory.record(Episode(query="rotate the key", response="done", outcome="success"))
    assert len(await memory.recall("rotate the key", since="today")) == 1
    assert str(memory.tz) == "Asia/Tokyo"
    start, _ = await anyio.to_thread.run_sync(lambda: parse_time("today", tz="Asia/Tokyo", now=NOW))
    assert await memory.forget(before=start + 1, dry_run=True) == 0


@pytest.mark.parametrize("now", [float("nan"), float("inf"), 1e20, -1e15, "now", True, None])
def test_parse_time_refuses_a_now_that_is_no_time(now: Any) -> None:
    if now is None:  # the default: the current time
        before = time.time()
        assert before - 7 * 86400 <= parse_time("7d", now=now)[0] <= time.time() - 7 * 86400
        return
    for value in ["yesterday", "the 1st", "7d", "2024-01-01"]:
        with pytest.raises(ConfigurationError, match="now must be"):
            parse_time(value, now=now)


@pytest.mark.parametrize(
    "value",
    ["yesterday\x00", "tuesday\u200b", "\u2066yesterday\u2069", "last\u00adweek", "today\x7f"],
)
def test_a_time_with_a_hidden_or_control_character_is_refused_spelled_out(value: str) -> None:
    # dateparser skips them, so "yesterday" and a lookalike would both pass: refused instead,
    # and the error spells the character out rather than carrying it.
    with pytest.raises(ConfigurationError) as raised:
        parse_time(value, now=NOW)
    message = str(raised.value)
    assert "hidden or control character" in message
    assert not any(c in message for c in "\x00\u200b\u2066\u2069\u00ad\x7f")
