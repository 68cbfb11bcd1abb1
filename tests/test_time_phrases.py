"""Phrases as a person there means them: read on the wall clock of the zone ("yesterday",
"a week ago" and "yesterday at 3pm" across a clock change name the calendar days and hours of
that clock, while "an hour ago" stays an hour), and a day of the month alone ("since the 1st")
is the last such day."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from deepcrew_episodic import ConfigurationError, parse_time

NEW_YORK = ZoneInfo("America/New_York")
PARIS = ZoneInfo("Europe/Paris")


def at(zone: ZoneInfo, *parts: int) -> float:
    return datetime(*parts, tzinfo=zone).timestamp()  # type: ignore[misc]


@pytest.mark.parametrize(
    ("zone", "now", "value", "start", "end"),
    [
        # New York moved its clocks forward at 02:00 on Sunday 8 March 2026. Half an hour
        # after the next midnight, yesterday is that Sunday (24 hours ago was Saturday).
        (NEW_YORK, (2026, 3, 9, 0, 30), "yesterday", (2026, 3, 8), (2026, 3, 9)),
        (NEW_YORK, (2026, 3, 9, 0, 30), "3 days ago", (2026, 3, 6), (2026, 3, 7)),
        (NEW_YORK, (2026, 3, 9, 0, 30), "last week", (2026, 3, 2), (2026, 3, 9)),
        (NEW_YORK, (2026, 3, 8, 3, 30), "yesterday at 3pm", (2026, 3, 7, 15), (2026, 3, 7, 15)),
        # It moved them back at 02:00 on Sunday 1 November: at 23:30 that day, yesterday is
        # Saturday, not the day itself.
        (NEW_YORK, (2026, 11, 1, 23, 30), "yesterday", (2026, 10, 31), (2026, 11, 1)),
        (NEW_YORK, (2026, 11, 1, 23, 30), "yesterday 3pm", (2026, 10, 31, 15), (2026, 10, 31, 15)),
        (NEW_YORK, (2026, 11, 1, 23, 30), "today", (2026, 11, 1), (2026, 11, 2)),
        # Paris moved forward on Sunday 29 March 2026.
        (PARIS, (2026, 3, 30, 0, 30), "yesterday", (2026, 3, 29), (2026, 3, 30)),
        (PARIS, (2026, 3, 30, 0, 30), "last week", (2026, 3, 23), (2026, 3, 30)),
        (PARIS, (2026, 3, 30, 0, 30), "since monday", (2026, 3, 23), (2026, 3, 24)),
    ],
)
def test_a_phrase_names_the_days_of_the_wall_clock_across_a_clock_change(
    zone: ZoneInfo,
    now: tuple[int, ...],
    value: str,
    start: tuple[int, ...],
    end: tuple[int, ...],
) -> None:
    assert parse_time(value, tz=zone.key, now=at(zone, *now)) == (at(zone, *start), at(zone, *end))


@pytest.mark.parametrize("value", ["an hour ago", "2 hours ago", "90 minutes ago", "in 1 hour"])
def test_hours_ago_across_a_clock_change_are_that_many_hours(value: str) -> None:
    # 03:30 on 8 March 2026 in New York, an hour and a half after the clocks went forward.
    now = at(NEW_YORK, 2026, 3, 8, 3, 30)
    seconds = {"an hour ago": -3600, "2 hours ago": -7200, "90 minutes ago": -5400}
    expected = now + seconds.get(value, 3600)
    assert parse_time(value, tz="America/New_York", now=now) == (expected, expected)


# Wednesday 2 December 2026, 10:30 UTC.
NOW = datetime(2026, 12, 2, 10, 30, tzinfo=ZoneInfo("UTC")).timestamp()


@pytest.mark.parametrize(
    ("value", "day"),
    [
        ("the 1st", (2026, 12, 1)),  # dateparser reads it as January
        ("since the 1st", (2026, 12, 1)),
        ("1st", (2026, 12, 1)),
        ("the 2nd", (2026, 12, 2)),  # today; dateparser reads it as February
        ("the 15th", (2026, 11, 15)),  # the last one, never the next
        ("on the 31st", (2026, 10, 31)),  # November has no 31st
        ("the 3rd", (2026, 11, 3)),
        ("the 1 st", (2026, 12, 1)),
    ],
)
def test_a_day_of_the_month_alone_is_the_last_one(value: str, day: tuple[int, int, int]) -> None:
    utc = ZoneInfo("UTC")
    start = datetime(*day, tzinfo=utc)
    end = datetime.fromordinal(start.toordinal() + 1).replace(tzinfo=utc)
    assert parse_time(value, now=NOW) == (start.timestamp(), end.timestamp())
    # In the zone given: at 10:30 UTC on 2 December it is already the 3rd in Kiritimati.
    assert parse_time("the 3rd", tz="Pacific/Kiritimati", now=NOW)[0] == at(
        ZoneInfo("Pacific/Kiritimati"), 2026, 12, 3
    )


@pytest.mark.parametrize(
    ("value", "moment"),
    [
        # "last month" is the calendar month before this one; "the past month", a month back
        # from now on the calendar, as "the past week" is seven days back.
        ("past month", (2026, 11, 2, 10, 30)),
        ("the past 3 months", (2026, 9, 2, 10, 30)),
        ("last 12 months", (2025, 12, 2, 10, 30)),
        ("past year", (2025, 12, 2, 10, 30)),
        ("last 2 years", (2024, 12, 2, 10, 30)),
    ],
)
def test_the_past_months_and_years_go_back_on_the_calendar(
    value: str, moment: tuple[int, ...]
) -> None:
    utc = ZoneInfo("UTC")
    expected = datetime(*moment, tzinfo=utc).timestamp()  # type: ignore[misc]
    assert parse_time(value, now=NOW) == (expected, expected)
    # From the last day of a longer month, to the last day of a shorter one.
    march_31 = datetime(2026, 3, 31, 12, tzinfo=utc).timestamp()
    assert (
        parse_time("past month", now=march_31)[0]
        == datetime(2026, 2, 28, 12, tzinfo=utc).timestamp()
    )
    # On the wall clock of the zone, across a clock change.
    paris = at(PARIS, 2026, 4, 15, 9)
    assert parse_time("past month", tz="Europe/Paris", now=paris)[0] == at(PARIS, 2026, 3, 15, 9)


@pytest.mark.parametrize(
    "value", ["2 days before yesterday", "an hour before noon", "1 day after 2026-03-01",
              "since 3 days before monday"],
)  # fmt: skip
def test_an_offset_from_another_time_is_refused_not_read_as_that_time(value: str) -> None:
    # dateparser drops "2 days before" and "1 day after" and answers yesterday, noon, or the
    # 3rd of December for "1 day after 2026-03-01": refused, as any part it cannot read is.
    with pytest.raises(ConfigurationError, match="is not a time"):
        parse_time(value, now=NOW)
    # The two it reads whole stay.
    utc = ZoneInfo("UTC")
    assert (
        parse_time("the day before yesterday", now=NOW)[0]
        == datetime(2026, 11, 30, tzinfo=utc).timestamp()
    )
    assert (
        parse_time("day after tomorrow", now=NOW)[0]
        == datetime(2026, 12, 4, tzinfo=utc).timestamp()
    )


@pytest.mark.parametrize("value", ["now", "until now", "NOW"])
def test_now_is_now_in_the_hour_a_clock_change_repeats(value: str) -> None:
    # 01:30 came twice in New York on 1 November 2026; the second one is 06:30 UTC.
    for hour in (5, 6):
        now = datetime(2026, 11, 1, hour, 30, tzinfo=ZoneInfo("UTC")).timestamp()
        assert parse_time(value, tz="America/New_York", now=now) == (now, now)
