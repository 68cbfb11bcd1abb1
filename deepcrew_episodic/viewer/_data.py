"""What the pages show, computed from the public API: a snapshot of the log, and the filters.

A snapshot is one :meth:`~deepcrew_episodic.EpisodicMemory.load` (last recorded first) with
what the pages derive from it (times, search text, the id map, ``stats()``) computed once, when
a page first needs it. ``load()`` copies every episode: about 11 µs each, so 1.1 s at 100,000
episodes. A snapshot that took longer than :data:`CHEAP_LOAD_SECONDS` to load is therefore kept
as long as the memory's revision (:meth:`~deepcrew_episodic.EpisodicMemory.refresh`, one round
trip) says the log did not change, no episode of it has expired since (checked on every page),
and at most :data:`REFRESH_SECONDS`; a smaller log is loaded again for every page. Every page
is therefore current: a record, a grade or a forget made by any process shows on the next page,
and an episode that expired is gone from it.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import TYPE_CHECKING, Any, get_args

import anyio

from .. import Outcome
from .._unicode import search_form
from ._safe import quoted

if TYPE_CHECKING:
    from .. import Episode, EpisodicMemory, Grade, MemoryStats

__all__ = [
    "BadRequest",
    "Filter",
    "Snapshot",
    "Source",
    "deciding",
    "out_of_date_order",
    "parse_filter",
    "parse_when",
]

# A load faster than this is repeated for every page (a small log is never shown stale).
CHEAP_LOAD_SECONDS = 0.05
# How long a slow-to-load snapshot is shown before the next page loads the log again.
REFRESH_SECONDS = 60.0
DEFAULT_PER_PAGE = 50
MAX_PER_PAGE = 500
# The longest text a filter field takes (a search needle longer than any episode is useless).
MAX_FILTER_CHARS = 1000
OUTCOMES: tuple[str, ...] = get_args(Outcome)  # the library's, in its order
_INTEGER = re.compile(r"[0-9]{1,9}", re.ASCII)
_FRACTION = re.compile(r"[0-9]{0,3}(\.[0-9]{0,9})?", re.ASCII)


class BadRequest(ValueError):
    """A query parameter the viewer cannot use: answered with HTTP 400 and this message."""


@dataclass
class Snapshot:
    """The log as one ``load()`` saw it, last recorded first, and what pages derive from it."""

    episodes: list[Episode]
    loaded_at: float  # time.time()
    load_seconds: float
    revision: int = 0  # the memory's revision it was loaded at (see EpisodicMemory.refresh)
    _times: list[float | None] | None = None
    _by_id: dict[str, Episode] | None = None
    _runs: dict[str, list[Episode]] | None = None
    stats: MemoryStats | None = None
    derived: dict[str, Any] = field(default_factory=dict)  # per-page results, e.g. the chart

    @property
    def times(self) -> list[float | None]:
        """Each episode's timestamp as POSIX seconds (``None``: missing or unreadable)."""
        if self._times is None:
            self._times = [_time_of(ep) for ep in self.episodes]
        return self._times

    def by_id(self, episode_id: str) -> Episode | None:
        if self._by_id is None:
            self._by_id = {ep.id: ep for ep in self.episodes}
        return self._by_id.get(episode_id)

    def run(self, run_id: str) -> list[Episode]:
        """The iterations of a run, in the order they were recorded."""
        if self._runs is None:
            runs: dict[str, list[Episode]] = {}
            for ep in reversed(self.episodes):
                if ep.run_id:
                    runs.setdefault(ep.run_id, []).append(ep)
            self._runs = runs
        return self._runs.get(run_id, [])


class Source:
    """The memory's snapshot, loaded again when it may be stale (see the module docstring)."""

    def __init__(self, memory: EpisodicMemory, *, refresh_seconds: float = REFRESH_SECONDS):
        self.memory = memory
        self.refresh_seconds = refresh_seconds
        self._snapshot: Snapshot | None = None
        self._lock = anyio.Lock()
        # Whether this source loaded the log once: the memory then holds it in this process,
        # and reading every grade costs one round trip (see grades_of).
        self._loaded = False

    def invalidate(self) -> None:
        """Forget the snapshot: the next page loads the log again (after a deletion)."""
        self._snapshot = None

    async def _fresh(self, snapshot: Snapshot | None) -> bool:
        # The memory's revision says whether the log changed since the snapshot (one round
        # trip); the age bound catches what only the clock changes (an episode expiring).
        if snapshot is None or snapshot.load_seconds < CHEAP_LOAD_SECONDS:
            return False
        if time.time() - snapshot.loaded_at >= self.refresh_seconds:
            return False
        if await self.memory.refresh() != snapshot.revision:
            return False
        # An episode that expired since the load is hidden at once, not at the next reload
        # (about 0.3 µs an episode: 30 ms at 100,000, against the second a load costs).
        is_expired = self.memory.is_expired
        return not any(is_expired(ep) for ep in snapshot.episodes)

    async def snapshot(self) -> Snapshot:
        # One check or load at a time: pages asked for meanwhile share its result.
        async with self._lock:
            if await self._fresh(self._snapshot):
                assert self._snapshot is not None
                return self._snapshot
            started = time.perf_counter()
            revision = await self.memory.refresh()
            episodes = await self.memory.load()
            episodes.reverse()
            self._snapshot = Snapshot(
                episodes, time.time(), time.perf_counter() - started, revision=revision
            )
            self._loaded = True
            return self._snapshot

    def times(self, snapshot: Snapshot) -> list[float | None]:
        """When each episode of *snapshot* was recorded, as recall's ``since`` and ``until``
        file it (``EpisodicMemory.recorded_at``: an undated one at the time of the one before
        it); computed once per snapshot."""
        times: list[float | None] | None = snapshot.derived.get("times")
        if times is None:
            when = self.memory.recorded_at
            times = snapshot.derived["times"] = [when(ep) for ep in snapshot.episodes]
        return times

    def texts(self, snapshot: Snapshot) -> list[str]:
        """What the search looks in, for each episode of *snapshot*: every text of the episode
        and its grades' notes, case-folded, by the rule ``forget(containing=...)`` uses
        (``EpisodicMemory.searched_text``); computed once per snapshot."""
        texts: list[str] | None = snapshot.derived.get("texts")
        if texts is None:
            searched = self.memory.searched_text
            texts = snapshot.derived["texts"] = [searched(ep) for ep in snapshot.episodes]
        return texts

    async def recorded(self, snapshot: Snapshot, episode: Episode) -> Episode | None:
        """*episode* as the run recorded it, before any grade (``load(graded=False)``, the one
        read the public API gives of it): read once per snapshot, and only when a page needs
        it (an episode page whose outcome a grade decided). ``None``: no longer stored."""
        recorded: dict[str, Episode] | None = snapshot.derived.get("recorded")
        if recorded is None:
            recorded = snapshot.derived["recorded"] = {
                ep.id: ep for ep in await self.memory.load(graded=False)
            }
        found = recorded.get(episode.id)
        # A grade applies to the episode it was given to, never to a later one with its id.
        return found if found is not None and found.timestamp == episode.timestamp else None

    async def grades_of(
        self, episodes: Sequence[Episode], snapshot: Snapshot | None = None
    ) -> dict[str, list[Grade]]:
        """The grades of *episodes* (oldest first), by id. With the *snapshot* they come from,
        every grade is read once per snapshot; when this source loaded the log before, once
        per call (the memory holds it: one round trip); else none (the timeline's first page
        reads its page alone: no grade, and never the whole log)."""
        wanted = {ep.id for ep in episodes}
        if snapshot is not None or self._loaded:
            every: dict[str, list[Grade]] | None = (
                snapshot.derived.get("grades") if snapshot is not None else None
            )
            if every is None:
                every = {}
                for grade in await self.memory.grades():
                    every.setdefault(grade.episode_id, []).append(grade)
                if snapshot is not None:
                    snapshot.derived["grades"] = every
            return {i: every[i] for i in wanted if i in every}
        # Not loaded: the first page of a large log reads the page alone, and no grade (one
        # read per row would cost more than the page; the marks come once the log is read).
        return {}

    async def stats(self, snapshot: Snapshot) -> MemoryStats:
        """``stats()``, once per snapshot (it reads every key of the namespace)."""
        if snapshot.stats is None:
            snapshot.stats = await self.memory.stats()
        return snapshot.stats


@dataclass(frozen=True)
class Filter:
    """The timeline's filter, from its query parameters."""

    outcomes: tuple[str, ...] = ()
    tag: str = ""
    agent: str = ""
    run: str = ""
    since: float | None = None
    until: float | None = None
    q: str = ""
    raw: dict[str, list[str]] = field(default_factory=dict)
    period: str = ""  # what since and until were read as, for the page to say

    @property
    def active(self) -> bool:
        return bool(
            self.outcomes
            or self.tag
            or self.agent
            or self.run
            or self.q
            or self.since is not None
            or self.until is not None
        )

    def params(self) -> list[tuple[str, str]]:
        """The filter's query parameters as given (for links and forms)."""
        return [(name, value) for name, values in self.raw.items() for value in values]

    async def apply(self, source: Source, snapshot: Snapshot) -> list[Episode]:
        """The snapshot's episodes this filter keeps, last recorded first."""
        if not self.active:
            return snapshot.episodes
        episodes = snapshot.episodes
        keep: list[int] | range = range(len(episodes))
        outcomes = set(self.outcomes)
        if outcomes:
            keep = [i for i in keep if episodes[i].outcome in outcomes]
        if self.tag:
            tag = self.tag.casefold()
            keep = [i for i in keep if any(t.casefold() == tag for t in episodes[i].tags)]
        if self.agent:
            keep = [i for i in keep if episodes[i].agent_id == self.agent]
        if self.run:
            keep = [i for i in keep if episodes[i].run_id == self.run]
        if self.since is not None or self.until is not None:
            times = source.times(snapshot)
            low = -math.inf if self.since is None else self.since
            high = math.inf if self.until is None else self.until
            keep = [i for i in keep if (t := times[i]) is not None and low <= t < high]
        if self.q:
            needle = search_form(self.q)
            texts = source.texts(snapshot)
            keep = [i for i in keep if needle in texts[i]]
        return [episodes[i] for i in keep]


def parse_filter(
    params: Mapping[str, Sequence[str]],
    *,
    tz: tzinfo | str | None = None,
    now: float | None = None,
) -> Filter:
    """The timeline's filter from query parameters; :class:`BadRequest` names a wrong one.
    Dates and phrases are read in *tz* (the memory's), relative to *now* (see
    :func:`parse_when`)."""
    raw: dict[str, list[str]] = {}

    def one(name: str) -> str:
        values = [v for v in params.get(name, ()) if v.strip()]
        if len(values) > 1:
            raise BadRequest(f"{name}: give it once, not {len(values)} times")
        value = values[0].strip() if values else ""
        if len(value) > MAX_FILTER_CHARS:
            raise BadRequest(f"{name}: at most {MAX_FILTER_CHARS} characters")
        if value:
            raw[name] = [value]
        return value

    outcomes = tuple(v for v in params.get("outcome", ()) if v)
    unknown = [o for o in outcomes if o not in OUTCOMES]
    if unknown:
        raise BadRequest(f"outcome: {quoted(unknown[0], 60)!r} is not one of {', '.join(OUTCOMES)}")
    if outcomes:
        raw["outcome"] = list(outcomes)
    tag, agent, run, q = one("tag"), one("agent"), one("run"), one("q")
    if q and not search_form(q):
        # Hidden characters only would match every episode (and the forget page delete them).
        raise BadRequest(f"q: {quoted(q, 60)!r} holds no visible text")
    since_text, until_text = one("since"), one("until")
    since = parse_when("since", since_text, tz=tz, now=now) if since_text else None
    until = parse_when("until", until_text, tz=tz, now=now) if until_text else None
    # Keep the given order of parameters in links: outcome, tag, agent, run, since, until, q.
    order = ("outcome", "tag", "agent", "run", "since", "until", "q")
    raw = {name: raw[name] for name in order if name in raw}
    period = _period(since, until, tz) if since is not None or until is not None else ""
    return Filter(
        tuple(dict.fromkeys(outcomes)), tag, agent, run, since, until, q, raw, period=period
    )


def _period(since: float | None, until: float | None, tz: tzinfo | str | None) -> str:
    """ "from 2026-11-30 00:00 to 2026-12-01 00:00 (Europe/Paris)": what a phrase such as
    "yesterday" was read as, in the zone it was read in."""
    if isinstance(tz, str):
        from zoneinfo import ZoneInfo

        zone: tzinfo = UTC if tz.strip().upper() in ("UTC", "Z", "GMT") else ZoneInfo(tz)
    else:
        zone = UTC if tz is None else tz

    def at(when: float) -> str:
        try:
            return datetime.fromtimestamp(when, zone).strftime("%Y-%m-%d %H:%M")
        except (OverflowError, ValueError, OSError):
            return "the end of time" if when > 0 else "the beginning of time"

    parts = ([f"from {at(since)}"] if since is not None else []) + (
        [f"to {at(until)}"] if until is not None else []
    )
    return f"{' '.join(parts)} ({zone})"


def parse_when(
    name: str, text: str, *, tz: tzinfo | str | None = None, now: float | None = None
) -> float:
    """A ``since`` or ``until`` as POSIX seconds: whatever the library's ``since`` takes (an
    ISO-8601 date or time, ``7d``, a phrase such as ``yesterday`` or ``last tuesday``; see
    :func:`~deepcrew_episodic.parse_time`). ``since`` is the start of the span the value
    names, ``until`` its end: a date or a day's phrase given as ``until`` includes the day."""
    from .. import ConfigurationError, parse_time

    try:
        start, end = parse_time(text, tz=tz, now=now)
    except ConfigurationError as exc:
        raise BadRequest(f"{name}: {str(exc).removeprefix('time: ')}") from None
    return end if name == "until" else start


def parse_count(name: str, text: str | None, *, default: int, maximum: int) -> int:
    """A positive integer query parameter, at most *maximum*."""
    if text is None or not text.strip():
        return default
    if not _INTEGER.fullmatch(text.strip()):
        raise BadRequest(f"{name}: {quoted(text, 60)!r} is not a whole number")
    value = int(text.strip())
    if not 1 <= value <= maximum:
        raise BadRequest(f"{name}: must be between 1 and {maximum}, not {value}")
    return value


def parse_fraction(name: str, text: str | None) -> float | None:
    """A number from 0 to 1 as a query parameter (``min_relevance``); ``None`` when absent."""
    if text is None or not text.strip():
        return None
    if not _FRACTION.fullmatch(text.strip()) or text.strip() == ".":
        raise BadRequest(f"{name}: {quoted(text, 60)!r} is not a number from 0 to 1")
    value = float(text.strip())
    if not 0.0 <= value <= 1.0:
        raise BadRequest(f"{name}: must be from 0 to 1, not {quoted(text, 60)}")
    return value


def deciding(episode: Episode, grades: Sequence[Grade]) -> int | None:
    """Which of *grades* (oldest first, as ``grades()`` gives them) decided the outcome
    *episode* shows, by its index; ``None``: the outcome is the one the run recorded.

    *episode* is as the memory shows it, graded. The rule is the library's (see "Grading
    later" in docs/recall.md): the grade from the best source (:attr:`Grade.rank`), the newest
    among equals, decides unless the recorded outcome outranks it, and the episode then reads
    the grade's :attr:`Grade.reads_as`. So that grade decided exactly when the episode reads
    what it says: a recorded outcome that outranked it would read otherwise (another source).
    """
    best: int | None = None
    for n, grade in enumerate(grades):
        if grade.applies_to(episode) and (best is None or grade.rank <= grades[best].rank):
            best = n
    if best is None or grades[best].reads_as != (episode.outcome, episode.outcome_source):
        return None
    return best


def out_of_date_order(episodes: Sequence[Episode]) -> bool:
    """Whether a listing in the order the episodes were recorded (the last first) shows one
    dated later than the one above it: recorded out of date order (imported, or recorded with
    an explicit timestamp), so the list is not newest first by date."""
    previous: float | None = None
    for ep in episodes:
        when = _time_of(ep)
        if when is None:
            continue
        if previous is not None and when > previous:
            return True
        previous = when
    return False


def _time_of(episode: Episode) -> float | None:
    try:
        return episode.time()
    except ValueError:
        return None


def top(counter: Counter[str], n: int = 10) -> list[tuple[str, int]]:
    """The *n* most frequent, ties by name (a stable page)."""
    return sorted(counter.items(), key=lambda item: (-item[1], item[0]))[:n]


def day_of(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%d")


def week_of(when: float) -> str:
    year, week, _ = datetime.fromtimestamp(when, UTC).isocalendar()
    return f"{year}-W{week:02d}"
