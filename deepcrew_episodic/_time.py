"""Times as people give them: ISO-8601 dates and times, durations, and phrases in English
("yesterday", "last tuesday", "3 days ago", "since monday", "this week"), in a time zone.

Every value names a span of time: a moment (an ISO time, a duration ago, a ``datetime``, POSIX
seconds, "an hour ago") is a span of no length; a date or a phrase that names a day, a week,
a month or a year ("2024-03-01", "2024-W10", "2024-03", "yesterday", "3 days ago", "this week",
"last month") covers all of it, from its first instant, in the time zone. Days are counted on
the zone's wall clock (the day after a clock change, "yesterday" is the calendar day before). A filter takes the end it needs: ``since``
and ``before`` the start, ``until`` the end (so ``until="yesterday"`` includes yesterday).

Phrases go to ``dateparser`` (English only, dates from the past preferred, relative to the
caller's clock), imported only for a value that is none of the other forms: it costs about
70 ms to import, which a command that takes an ISO date or ``7d`` never pays.
"""

from __future__ import annotations

import calendar
import math
import re
import unicodedata
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Any

from ._exceptions import ConfigurationError, MissingDependencyError
from ._validate import number, shown

__all__ = [
    "FORMS",
    "TimeLike",
    "TimeReader",
    "needs_reading",
    "parse_time",
    "span",
    "zone",
    "zone_given",
]

TimeLike = datetime | date | timedelta | str | float

# What the error for a value that is no time lists.
FORMS = (
    "an ISO-8601 date or time (2024-03-01, 2024-03-01T09:30+01:00), a duration meaning that "
    "long ago (90s, 30m, 12h, 7d, 2w), or a phrase (yesterday, last tuesday, 3 days ago, "
    "since monday, this week)"
)
# A phrase longer than this is no time anyone types (and dateparser's work grows with it).
MAX_PHRASE_CHARS = 100

_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([smhdw])", re.ASCII)
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
# ISO-8601 dates, each naming a span: a day (extended or basic form, or a week day), a week,
# a month. fromisoformat reads the first two as a moment at midnight, and no month at all.
_DATE_ONLY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}|[0-9]{8}|[0-9]{4}-?W[0-9]{2}-?[0-9]", re.ASCII)
_ISO_WEEK = re.compile(r"[0-9]{4}-?W[0-9]{2}", re.ASCII)
_ISO_MONTH = re.compile(r"([0-9]{4})-([0-9]{2})", re.ASCII)
# A phrase has a word: "5", "-5d" or "1e9d" are no phrase (dateparser reads "5" as May).
_WORD = re.compile(r"[a-z]{2,}", re.ASCII | re.IGNORECASE)
# The word before a phrase that says how it is used, which the parameter already says.
_LEADING = re.compile(r"^(?:since|from|after|until|till|before|on)\s+", re.IGNORECASE)
# "last 7 days", "past week", "the past 3 hours": that long ago (dateparser reads none;
# "last week" it reads as the calendar week before this one).
_LAST_N = re.compile(
    r"^(?:the\s+)?(?:past\s+|last\s+(?=[0-9]))(?:([0-9]{1,6}|an?)\s+)?"
    r"(second|minute|hour|day|week|month|year)s?$",
    re.ASCII | re.IGNORECASE,
)
# An offset from another time ("2 days before yesterday"), which dateparser reads as that time,
# but for the two it reads whole.
_OFFSET = re.compile(r"\b(?:before|after)\b", re.IGNORECASE)
_DAY_AROUND = re.compile(r"(?:the\s+)?day\s+(?:before\s+yesterday|after\s+tomorrow)", re.I)
# A time of day in a phrase ("3pm", "14:00"): the phrase must then name a moment.
_CLOCK = re.compile(r"[0-9]\s*(?:am|pm)\b|[0-9]:[0-9]", re.ASCII | re.IGNORECASE)
# "the 1st", "15th": a day of the month alone (dateparser reads "the 2nd" as February, and
# "the 15th" as the next one, whatever PREFER_DATES_FROM says).
_ORDINAL = re.compile(r"(?:the\s+)?([0-9]{1,2})\s?(?:st|nd|rd|th)", re.ASCII | re.IGNORECASE)
# A phrase counted in hours, minutes or seconds ("an hour ago", "in 90 minutes"), or "now":
# real time from now, not the wall clock (which repeats an hour when the clocks go back).
_SUB_DAY = re.compile(r"\b(?:now|hours?|hrs?|minutes?|mins?|seconds?|secs?)\b", re.IGNORECASE)
_UNIT_SECONDS = {"second": 1.0, "minute": 60.0, "hour": 3600.0, "day": 86400.0, "week": 604800.0}
_DAY = 86400.0
_FIRST, _LAST = -62135596800.0, 253402300799.0  # 0001-01-01 and 9999-12-31T23:59:59, UTC


def zone(value: str | tzinfo | None, *, name: str = "tz") -> tzinfo:
    """The time zone *value* names: a ``tzinfo``, an IANA name (``"Europe/Paris"``,
    ``"UTC"``), or ``None`` for UTC."""
    if value is None:
        return UTC
    if _pytz_name(value) is not None:
        return zone(_pytz_name(value), name=name)
    if isinstance(value, tzinfo):
        return value
    if not isinstance(value, str):
        raise ConfigurationError(
            f"{name} must be an IANA time zone name (Europe/Paris) or a tzinfo, not "
            f"{type(value).__name__}"
        )
    text = value.strip().removeprefix(":")  # glibc's TZ=":Europe/Paris"
    if text.upper() in ("UTC", "Z", "GMT"):
        return UTC
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        if not text or not text.isascii() or ".." in text or text.startswith("/"):
            raise ValueError(text)
        return ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ConfigurationError(
            f"{name}: {shown(value)} is not a time zone (give an IANA name such as "
            f"Europe/Paris, America/New_York or UTC)"
        ) from None


def zone_given(value: str | tzinfo | None, *, name: str = "tz") -> tzinfo | str:
    """*value* checked without reading the time zone database (no I/O: a constructor can
    call it on an event loop): UTC or a ``tzinfo`` as itself, any other name as given, for
    :func:`zone` to load later. A value that cannot be a zone name is refused here."""
    if _pytz_name(value) is not None:
        return zone_given(_pytz_name(value), name=name)
    if value is None or isinstance(value, tzinfo):
        return UTC if value is None else value
    if not isinstance(value, str):
        raise ConfigurationError(
            f"{name} must be an IANA time zone name (Europe/Paris) or a tzinfo, not "
            f"{type(value).__name__}"
        )
    text = value.strip().removeprefix(":")
    if text.upper() in ("UTC", "Z", "GMT"):
        return UTC
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_+\-]*(?:/[A-Za-z0-9_+\-]+)*", text, re.ASCII):
        raise ConfigurationError(
            f"{name}: {shown(value)} is not a time zone (give an IANA name such as "
            f"Europe/Paris, America/New_York or UTC)"
        )
    return text


def _pytz_name(value: Any) -> str | None:
    """The name of a pytz zone (dateparser's dependency, so often at hand), read by that name:
    given to ``datetime()``, a pytz zone's offset is its first one (Paris: +00:09, mean solar
    time), not the one in force."""
    name = getattr(value, "zone", None)
    return (
        name
        if isinstance(value, tzinfo) and hasattr(value, "localize") and isinstance(name, str)
        else None
    )


def needs_reading(value: Any, tz: tzinfo | str) -> bool:
    """Whether :func:`span` of *value* may read files: a phrase (dateparser is imported and
    loads its data), or a date or a time without a zone while *tz* is a name not loaded yet.
    Such a value is read in a worker thread by a caller on an event loop."""
    if isinstance(value, datetime) or not isinstance(value, str | date):
        return False
    if isinstance(tz, str):
        return True
    if not isinstance(value, str):
        return False
    text = " ".join(value.split())
    try:
        if not text or _duration("", value, text) is not None or _iso("", value, text, UTC):
            return False
    except ConfigurationError:
        return False  # refused at once, with no file read
    return len(text) <= MAX_PHRASE_CHARS and _WORD.search(text) is not None


def parse_time(
    value: TimeLike, *, tz: str | tzinfo | None = None, now: float | None = None
) -> tuple[float, float]:
    """The span of time *value* names, as POSIX seconds ``(start, end)``: the same for a
    moment, a whole day, week, month or year for a date or a phrase that names one.

    *value* is what every ``since``/``until``/``before`` of the library takes: an ISO-8601
    date or time, a duration meaning that long ago (``"7d"``, ``"12h"``, a ``timedelta``), a
    phrase (``"yesterday"``, ``"last tuesday"``, ``"3 days ago"``, ``"since monday"``,
    ``"this week"``), a ``datetime`` with a zone, a ``date``, or POSIX seconds. Dates, phrases
    and times without a zone are read in *tz* (an IANA name or a ``tzinfo``; default UTC),
    relative to *now* (POSIX seconds; default the current time). A value that is no time
    raises :class:`~deepcrew_episodic.ConfigurationError` naming it and the forms accepted.

    Example::

        start, end = parse_time("yesterday", tz="Europe/Paris")
        await memory.recall("deploy", since=start, until=end)
    """
    import time

    # Years 1 to 9999, in POSIX seconds: a clock outside them has no day to count from.
    moment = time.time() if now is None else number("now", now, minimum=_FIRST, maximum=_LAST)
    return span(value, name="time", now=moment, tz=zone(tz))


def span(value: Any, *, name: str, now: float, tz: tzinfo) -> tuple[float, float]:
    """:func:`parse_time`, for the library's own parameters: errors name *name*."""
    if isinstance(value, bool):
        raise ConfigurationError(f"{name} must be a time ({FORMS}), not a bool")
    if isinstance(value, timedelta):
        if value <= timedelta(0):  # as "-3d": "before=timedelta(days=-90)" is every episode
            raise ConfigurationError(f"{name}: {shown(value)}: a duration must be positive")
        return _moment(name, value, now - value.total_seconds())
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ConfigurationError(f"{name}: a naive datetime is ambiguous; give it a tzinfo")
        return _moment(name, value, _timestamp(name, value))
    if isinstance(value, date):
        return _day(name, value, value, tz)
    if isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:  # an int too large for a float
            seconds = math.inf
        if not math.isfinite(seconds):
            raise ConfigurationError(f"{name} must be a finite number of POSIX seconds")
        return _moment(name, value, seconds)
    if not isinstance(value, str):
        raise ConfigurationError(f"{name} must be a time ({FORMS}), not {type(value).__name__}")
    text = " ".join(value.split())
    if not text:
        raise ConfigurationError(f"{name}: an empty text is no time; give {FORMS}")
    if any(unicodedata.category(c) in ("Cc", "Cf") for c in text):
        # dateparser skips them ("yesterday\u200b" reads as yesterday): refused, not guessed.
        raise ConfigurationError(
            f"{name}: {shown(value)} holds a hidden or control character; give {FORMS}"
        )
    ago = _duration(name, value, text)
    if ago is not None:
        _check_range(name, value, now - ago)  # "3000000d" ago is before year 1
        return _moment(name, value, now - ago)
    found = _iso(name, value, text, tz)
    if found is not None:
        return found
    return _phrase(name, value, text, now, tz)


def _moment(name: str, value: Any, when: float) -> tuple[float, float]:
    # POSIX milliseconds given as seconds are no time: refused, not a filter that keeps nothing.
    _check_range(name, value, when)
    return when, when


def _check_range(name: str, value: Any, when: float) -> None:
    try:
        datetime.fromtimestamp(when, UTC)
    except (OverflowError, ValueError, OSError):
        raise ConfigurationError(
            f"{name}: {shown(value)} is out of range (years 1 to 9999 in UTC)"
        ) from None


def _timestamp(name: str, value: Any, moment: datetime | None = None) -> float:
    try:
        return (value if moment is None else moment).timestamp()
    except (OverflowError, ValueError, OSError):
        raise ConfigurationError(
            f"{name}: {shown(value)} is out of range (years 1 to 9999 in UTC)"
        ) from None


def _duration(name: str, value: str, text: str) -> float | None:
    """Seconds of a duration (``90s``, ``1d12h``), ``None`` for text of another form."""
    compact = text.lower().replace(" ", "")
    parts = list(_DURATION.finditer(compact))
    if not parts or "".join(p.group(0) for p in parts) != compact:
        return None
    try:
        # Through timedelta, as retention durations are: 0.0000001s is no duration.
        seconds = timedelta(
            seconds=sum(float(p.group(1)) * _UNITS[p.group(2)] for p in parts)
        ).total_seconds()
    except (OverflowError, ValueError):
        raise ConfigurationError(
            f"{name}: {shown(value)} is too long a duration (at most {timedelta.max.days} days)"
        ) from None
    if seconds <= 0:
        raise ConfigurationError(f"{name}: {shown(value)}: a duration must be positive")
    return seconds


def _iso(name: str, value: str, text: str, tz: tzinfo) -> tuple[float, float] | None:
    """An ISO-8601 date (its whole day in *tz*, or in UTC with ``Z``) or time (in *tz*
    without an offset); ``None`` for text of another form."""
    iso = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
    if not iso[:1].isdigit() or not iso.isascii():  # fromisoformat takes "٢٠٢٤-..." too
        return None
    bare = iso.removesuffix("+00:00")
    where = UTC if bare != iso else tz
    week, month = _ISO_WEEK.fullmatch(bare), _ISO_MONTH.fullmatch(bare)
    if _DATE_ONLY.fullmatch(bare) or week or month:
        try:
            if month:
                first = date(int(month.group(1)), int(month.group(2)), 1)
                length = calendar.monthrange(first.year, first.month)[1]
            else:
                first, length = date.fromisoformat(bare), 7 if week else 1
        except ValueError:
            raise ConfigurationError(f"{name}: {shown(value)} is not a date") from None
        return _days(name, value, first, length, where)
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        if re.fullmatch(r"[0-9]{4}-[0-9]{2}.*", iso, re.ASCII):
            raise ConfigurationError(
                f"{name}: {shown(value)} is not an ISO-8601 date or time"
            ) from None
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=tz)
    return _moment(name, value, _timestamp(name, value, moment))


def _day(name: str, value: Any, first: date, tz: tzinfo) -> tuple[float, float]:
    """The day *first* from its first instant in *tz* to the next day's."""
    return _days(name, value, first, 1, tz)


def _days(name: str, value: Any, first: date, days: int, tz: tzinfo) -> tuple[float, float]:
    start = _timestamp(name, value, datetime(first.year, first.month, first.day, tzinfo=tz))
    try:
        after = first + timedelta(days=days)
        end = datetime(after.year, after.month, after.day, tzinfo=tz).timestamp()
    except OverflowError:  # the day after 9999-12-31 is no date
        end = start + days * _DAY
    return start, end


def _phrase(name: str, value: str, text: str, now: float, tz: tzinfo) -> tuple[float, float]:
    refused = ConfigurationError(f"{name}: {shown(value)} is not a time; give {FORMS}")
    if len(text) > MAX_PHRASE_CHARS or not _WORD.search(text):
        raise refused
    if any(c.isdigit() and not c.isascii() for c in text):
        raise refused
    text = _LEADING.sub("", text)
    if _OFFSET.search(text) and not _DAY_AROUND.fullmatch(text):
        # dateparser drops "2 days before" and answers yesterday for "2 days before yesterday".
        raise refused
    last = _LAST_N.fullmatch(text)
    if last:
        count = 1 if last.group(1) in (None, "a", "an") else int(last.group(1))
        unit = last.group(2).lower()
        if unit in ("month", "year"):
            return _months_back(name, value, count * (12 if unit == "year" else 1), now, tz)
        return _moment(name, value, now - count * _UNIT_SECONDS[unit])
    ordinal = _ORDINAL.fullmatch(text)
    if ordinal:
        return _day_of_month(name, value, int(ordinal.group(1)), now, tz)
    try:
        from dateparser.date import DateDataParser  # type: ignore[import-untyped]
    except ImportError:
        raise MissingDependencyError(
            f"{name}: reading {shown(value)} as a phrase needs dateparser: pip install dateparser"
        ) from None
    from dateparser.timezone_parser import pop_tz_offset_from_string  # type: ignore[import-untyped]

    # dateparser counts days on absolute time in its TIMEZONE: across a clock change, the
    # day before 00:30 is two calendar days back. A phrase that names no zone is read on the
    # wall clock instead (in UTC, which has no clock change) and its result is wall time in
    # *tz*. One that names a zone ("3pm UTC") goes to dateparser with the zone by name, never
    # its default ("local", through tzlocal, which fails on a TZ such as "UTC0"); a zone
    # without a name (a fixed offset) is passed as UTC.
    wall = pop_tz_offset_from_string(text)[1] is None
    key = "UTC" if wall or tz is UTC else getattr(tz, "key", None)
    base = datetime.fromtimestamp(now, UTC).astimezone(tz).replace(tzinfo=None)
    parser = DateDataParser(
        languages=["en"],
        settings={
            # "tuesday" is the last one, not the next; relative to the caller's clock, so
            # that a test's fixed clock gives a fixed answer.
            "PREFER_DATES_FROM": "past",
            "RELATIVE_BASE": base,
            "RETURN_TIME_AS_PERIOD": True,
            "TIMEZONE": key if isinstance(key, str) else "UTC",
            "RETURN_AS_TIMEZONE_AWARE": True,
        },
    )
    try:
        found = parser.get_date_data(text)
    except Exception as exc:  # dateparser's own failure on odd text: named, cause kept
        from ._redact import safe_message

        raise ConfigurationError(
            f"{name}: {shown(value)} could not be read as a phrase "
            f"({type(exc).__name__}: {safe_message(str(exc), 120)}); give {FORMS}"
        ) from exc
    moment: datetime | None = found.date_obj if found else None
    if moment is None:
        raise refused
    period = found.period
    if wall and period == "time" and _SUB_DAY.search(text) and not _CLOCK.search(text):
        # "an hour ago" is an hour of real time, whatever the wall clock did meanwhile.
        return _moment(name, value, now + (moment.replace(tzinfo=None) - base).total_seconds())
    local = (
        moment.astimezone(tz)
        if not wall and isinstance(key, str) and moment.tzinfo is not None
        else moment.replace(tzinfo=tz)
    )
    if period != "time" and _CLOCK.search(text):
        # dateparser drops a time of day it cannot read ("yesterday at 25:00" reads as
        # yesterday): a part of the value ignored is refused, not guessed around.
        raise refused
    if period in ("day", "week", "month", "year"):
        day = local.date()
        try:
            if period == "day":
                first, days = day, 1
            elif period == "week":
                first, days = day - timedelta(days=day.weekday()), 7
            elif period == "month":
                first, days = day.replace(day=1), calendar.monthrange(day.year, day.month)[1]
            else:
                first, days = day.replace(month=1, day=1), 365 + calendar.isleap(day.year)
        except OverflowError:
            raise ConfigurationError(
                f"{name}: {shown(value)} is out of range (years 1 to 9999 in UTC)"
            ) from None
        return _days(name, value, first, days, tz)
    return _moment(name, value, _timestamp(name, value, local))


def _day_of_month(name: str, value: str, day: int, now: float, tz: tzinfo) -> tuple[float, float]:
    """The last day numbered *day* of a month, today included (the 31st: of the last month
    that has one)."""
    refused = ConfigurationError(f"{name}: {shown(value)} is not a day of the month (1st to 31st)")
    if not 1 <= day <= 31:
        raise refused
    today = datetime.fromtimestamp(now, UTC).astimezone(tz).date()
    year, month = today.year, today.month
    while day > today.day or day > calendar.monthrange(year, month)[1]:
        year, month = (year, month - 1) if month > 1 else (year - 1, 12)
        if year < 1:
            raise refused
        today = date(year, month, calendar.monthrange(year, month)[1])
    return _day(name, value, date(year, month, day), tz)


def _months_back(name: str, value: str, months: int, now: float, tz: tzinfo) -> tuple[float, float]:
    """*months* back from *now* on the wall calendar of *tz*, to the same day and time (the
    month's last day when it has no such day: a month before 31 March is 28 February)."""
    wall = datetime.fromtimestamp(now, UTC).astimezone(tz)
    total = wall.year * 12 + wall.month - 1 - months
    year, month = divmod(total, 12)
    if year < 1:
        raise ConfigurationError(f"{name}: {shown(value)} is out of range (years 1 to 9999 in UTC)")
    day = min(wall.day, calendar.monthrange(year, month + 1)[1])
    back = wall.replace(year=year, month=month + 1, day=day, tzinfo=tz, fold=0)
    return _moment(name, value, _timestamp(name, value, back))


class TimeReader:
    """The times one memory is given (``since``, ``until``, ``before``), read in its time zone
    and relative to its clock. A zone name is loaded (a file read) when a time first needs it,
    in a worker thread, and kept."""

    def __init__(self, tz: tzinfo | str, clock: Callable[[], float]) -> None:
        self.tz = tz  # as given (see zone_given) until a time needs the zone loaded
        self._clock = clock

    async def read(self, name: str, value: TimeLike | None) -> float | None:
        """A ``since``/``before`` (the start of the span *value* names) or an ``until`` (its
        end) as POSIX seconds; ``None`` for ``None``. A phrase, or a zone not loaded yet, is
        read in a worker thread: dateparser's import and the zone database are file reads."""
        if value is None:
            return None
        if needs_reading(value, self.tz):
            import anyio.to_thread

            start, end = await anyio.to_thread.run_sync(self._span, name, value)
        else:
            start, end = self._span(name, value)
        return end if name == "until" else start

    def _span(self, name: str, value: TimeLike) -> tuple[float, float]:
        if isinstance(self.tz, str) and needs_reading(value, self.tz):
            self.tz = zone(self.tz)
        tz = self.tz if not isinstance(self.tz, str) else UTC  # a moment needs no zone
        return span(value, name=name, now=self._clock(), tz=tz)
