"""ISO-8601 dates in each of their forms name the whole span they write: a day in the basic
form (20260301) or as a week day (2026-W10-1) is that day as 2026-03-01 is, a week (2026-W10)
its seven days, a month (2026-03) all of it; read in the zone given, like every date."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from deepcrew_episodic import ConfigurationError, parse_time


def utc(*parts: int) -> float:
    return datetime(*parts, tzinfo=UTC).timestamp()  # type: ignore[misc]


@pytest.mark.parametrize(
    ("value", "start", "end"),
    [
        ("20260301", utc(2026, 3, 1), utc(2026, 3, 2)),
        ("2026-W10-1", utc(2026, 3, 2), utc(2026, 3, 3)),
        ("2026W107", utc(2026, 3, 8), utc(2026, 3, 9)),
        ("2026-W10", utc(2026, 3, 2), utc(2026, 3, 9)),
        ("2026W53", utc(2026, 12, 28), utc(2027, 1, 4)),
        ("2026-03", utc(2026, 3, 1), utc(2026, 4, 1)),
        ("2024-02", utc(2024, 2, 1), utc(2024, 3, 1)),
        ("2026-12Z", utc(2026, 12, 1), utc(2027, 1, 1)),
        # A time in the basic form stays a moment.
        ("20260301T1030", utc(2026, 3, 1, 10, 30), utc(2026, 3, 1, 10, 30)),
    ],
)
def test_every_iso_date_form_names_its_whole_span(value: str, start: float, end: float) -> None:
    assert parse_time(value) == (start, end)


def test_an_iso_month_is_read_in_the_zone_given() -> None:
    paris = ZoneInfo("Europe/Paris")
    start, end = parse_time("2026-03", tz="Europe/Paris")
    assert start == datetime(2026, 3, 1, tzinfo=paris).timestamp()
    assert end == datetime(2026, 4, 1, tzinfo=paris).timestamp()
    # until="20260301" includes the day, as until="2026-03-01" does.
    assert parse_time("20260301", tz="Europe/Paris") == parse_time("2026-03-01", tz="Europe/Paris")


@pytest.mark.parametrize("value", ["2026-13", "2026-00", "2026-W54", "2026-W00", "20261301"])
def test_an_iso_form_of_no_date_is_refused_naming_it(value: str) -> None:
    with pytest.raises(ConfigurationError, match=value):
        parse_time(value)
