"""Times as people give them (ISO-8601, durations, English phrases, in a time zone) wherever a
time is taken, ``recall``'s ``until``, and ``history``: a task's runs over time and where the
run of successes broke. The API on real stores with a fixed clock; the command line through its
real entry point (``python -m deepcrew_episodic`` and the console script) in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import anyio
import pytest

from deepcrew_episodic import (
    ConfigurationError,
    Episode,
    EpisodicMemory,
    History,
    SyncEpisodicMemory,
    parse_time,
)
from deepcrew_episodic.providers import FileMemoryProvider, InMemoryProvider

# Wednesday 2 December 2026, 10:30 UTC.
NOW = datetime(2026, 12, 2, 10, 30, tzinfo=UTC).timestamp()
DAY = 86400.0
SCRIPT = Path(sys.executable).with_name("deepcrew-episodic")


def utc(*parts: int) -> float:
    return datetime(*parts, tzinfo=UTC).timestamp()  # type: ignore[misc]


def local(zone: str, *parts: int) -> float:
    return datetime(*parts, tzinfo=ZoneInfo(zone)).timestamp()  # type: ignore[misc]


# --- reading a time ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "start", "end"),
    [
        # A day, a week, a month, a year: the whole of it.
        ("yesterday", utc(2026, 12, 1), utc(2026, 12, 2)),
        ("today", utc(2026, 12, 2), utc(2026, 12, 3)),
        ("last tuesday", utc(2026, 12, 1), utc(2026, 12, 2)),
        ("tuesday", utc(2026, 12, 1), utc(2026, 12, 2)),  # the last one, never the next
        ("since monday", utc(2026, 11, 30), utc(2026, 12, 1)),
        ("Monday", utc(2026, 11, 30), utc(2026, 12, 1)),
        ("3 days ago", utc(2026, 11, 29), utc(2026, 11, 30)),
        ("the day before yesterday", utc(2026, 11, 30), utc(2026, 12, 1)),
        ("this week", utc(2026, 11, 30), utc(2026, 12, 7)),  # Monday to Monday
        ("last week", utc(2026, 11, 23), utc(2026, 11, 30)),
        ("2 weeks ago", utc(2026, 11, 16), utc(2026, 11, 23)),
        ("last month", utc(2026, 11, 1), utc(2026, 12, 1)),
        ("this year", utc(2026, 1, 1), utc(2027, 1, 1)),
        ("march 3", utc(2026, 3, 3), utc(2026, 3, 4)),
        ("2024-03-01", utc(2024, 3, 1), utc(2024, 3, 2)),
        ("2024-03-01Z", utc(2024, 3, 1), utc(2024, 3, 2)),
        (date(2024, 2, 29), utc(2024, 2, 29), utc(2024, 3, 1)),
        # A moment.
        ("an hour ago", NOW - 3600, NOW - 3600),
        ("yesterday 3pm", utc(2026, 12, 1, 15), utc(2026, 12, 1, 15)),
        ("last 7 days", NOW - 7 * DAY, NOW - 7 * DAY),
        ("past week", NOW - 7 * DAY, NOW - 7 * DAY),
        ("the past 3 hours", NOW - 3 * 3600, NOW - 3 * 3600),
        ("7d", NOW - 7 * DAY, NOW - 7 * DAY),
        ("1d12h", NOW - 1.5 * DAY, NOW - 1.5 * DAY),
        (timedelta(hours=2), NOW - 7200, NOW - 7200),
        ("2024-03-01T09:30", utc(2024, 3, 1, 9, 30), utc(2024, 3, 1, 9, 30)),
        ("2024-03-01T09:30+01:00", utc(2024, 3, 1, 8, 30), utc(2024, 3, 1, 8, 30)),
        (datetime(2024, 3, 1, tzinfo=UTC), utc(2024, 3, 1), utc(2024, 3, 1)),
        (1.7e9, 1.7e9, 1.7e9),
        ("  Since   YESTERDAY ", utc(2026, 12, 1), utc(2026, 12, 2)),
    ],
)
def test_every_form_names_a_span_in_utc_by_default(value: Any, start: float, end: float) -> None:
    assert parse_time(value, now=NOW) == (start, end)


@pytest.mark.parametrize(
    ("value", "start", "end"),
    [
        # 10:30 UTC is 11:30 in Paris: the same "yesterday", from Paris's midnight.
        ("yesterday", (2026, 12, 1), (2026, 12, 2)),
        ("this week", (2026, 11, 30), (2026, 12, 7)),
        ("2024-03-01", (2024, 3, 1), (2024, 3, 2)),
        ("2024-03-01T09:30", (2024, 3, 1, 9, 30), (2024, 3, 1, 9, 30)),
    ],
)
def test_a_time_zone_moves_days_and_times_without_one(
    value: str, start: tuple[int, ...], end: tuple[int, ...]
) -> None:
    paris = ("Europe/Paris", ZoneInfo("Europe/Paris"))
    for tz in paris:
        assert parse_time(value, tz=tz, now=NOW) == (local(paris[0], *start), local(paris[0], *end))
    # A time that says its zone keeps it; a duration is a moment in any zone.
    assert parse_time("2024-03-01T09:30Z", tz="Europe/Paris") == parse_time("2024-03-01T09:30Z")
    assert parse_time("7d", tz="Asia/Tokyo", now=NOW) == (NOW - 7 * DAY, NOW - 7 * DAY)
    assert parse_time("yesterday 3pm UTC", tz="America/New_York", now=NOW)[0] == utc(
        2026, 12, 1, 15
    )


def test_the_zone_decides_which_day_it_is() -> None:
    # 23:30 UTC on Tuesday is already Wednesday in Tokyo: "yesterday" there is Tuesday.
    late = utc(2026, 12, 1, 23, 30)
    assert parse_time("yesterday", now=late)[0] == utc(2026, 11, 30)
    assert parse_time("yesterday", tz="Asia/Tokyo", now=late) == (
        local("Asia/Tokyo", 2026, 12, 1),
        local("Asia/Tokyo", 2026, 12, 2),
    )
    # A fixed offset without a name works too.
    plus_two = timezone(timedelta(hours=2))
    assert parse_time("yesterday", tz=plus_two, now=NOW)[0] == utc(2026, 11, 30, 22)


def test_a_day_across_a_clock_change_is_as_long_as_it_is() -> None:
    # Paris moved its clocks forward on 29 March 2026: that day has 23 hours.
    start, end = parse_time("yesterday", tz="Europe/Paris", now=utc(2026, 3, 30, 12))
    assert end - start == 23 * 3600
    start, end = parse_time("2026-10-25", tz="Europe/Paris")
    assert end - start == 25 * 3600


NOT_TIMES = ["someday", "soon", "5", "1234", "-5d", "1e9d", "inf", "nan", "last", "since",
             "\u0663d", "\u00b2d", "\u0661\u0662\u0663\u0664-\u0660\u0661-\u0660\u0661", "x" * 300, "Europe/Paris", "2024-13-01",
             "2024-03-01T25:00", "mañana", "yesterday at 25:00"]  # fmt: skip


@pytest.mark.parametrize("value", NOT_TIMES)
def test_a_value_that_is_no_time_is_refused_naming_it_and_the_forms(value: str) -> None:
    with pytest.raises(ConfigurationError) as raised:
        parse_time(value, now=NOW)
    message = str(raised.value)
    assert repr(value[:20])[1:-1] in message
    assert len(message) < 400
    if not value.startswith("2024"):
        assert "yesterday, last tuesday" in message
        assert "7d" in message


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("0d", "positive"),
        ("0.0000001s", "positive"),
        ("3000000d", "out of range"),
        ("99999999999d", "too long"),
        (True, "bool"),
        (float("inf"), "finite"),
        (b"2024-01-01", "bytes"),
        (datetime(2024, 1, 1), "naive"),
    ],
)
def test_values_of_the_right_kind_that_no_time_can_hold(value: Any, words: str) -> None:
    with pytest.raises(ConfigurationError, match=words):
        parse_time(value, now=NOW)


@pytest.mark.parametrize("tz", ["Mars/Olympus", "", "../etc/passwd", "UTC0", 5])
def test_parse_time_refuses_an_unknown_time_zone(tz: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"time zone|tz must be"):
        parse_time("yesterday", tz=tz)


async def refused(memory: EpisodicMemory) -> None:
    with pytest.raises(ConfigurationError, match="tz: 'Mars/Olympus' is not a time zone"):
        await memory.recall("x", since="yesterday")


@pytest.mark.parametrize("tz", ["", "../etc/passwd", "UTC0 x", 5])
def test_a_memory_refuses_what_cannot_be_a_zone_at_once(tz: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"time zone|tz must be"):
        EpisodicMemory(InMemoryProvider(), tz=tz)


@pytest.mark.anyio
async def test_a_memory_loads_its_zone_off_the_event_loop_and_names_an_unknown_one() -> None:
    # A zone name is a file read in the zone database: done in a worker thread on first use
    # (blockbuster fails this test if it is done on the loop), and a name the database does
    # not hold is refused then, with nothing read or written.
    memory = EpisodicMemory(InMemoryProvider(), clock=lambda: NOW, tz="Mars/Olympus")
    assert memory.tz == "Mars/Olympus"
    await refused(memory)
    paris = EpisodicMemory(InMemoryProvider(), clock=lambda: NOW, tz="Europe/Paris")
    stored = await paris.record(Episode(query="water the plants", timestamp="2026-12-01T23:30:00Z"))
    assert [e.id for e in await paris.recall("water plants", since="today")] == [stored.id]
    assert str(paris.tz) == "Europe/Paris"
    assert [e.id for e in await paris.recall("water plants", since="2026-12-02")] == [stored.id]
    assert await paris.recall("water plants", since=utc(2026, 12, 2)) == []


def test_phrases_need_dateparser_only_when_one_is_given() -> None:
    # dateparser costs about 70 ms to import: ISO times and durations never load it.
    code = (
        "import sys\n"
        "from datetime import timedelta\n"
        "from deepcrew_episodic import parse_time\n"
        "for v in ('2024-03-01', '2024-03-01T09:30+01:00', '7d', 1.7e9, timedelta(1)):\n"
        "    parse_time(v)\n"
        "print('dateparser' in sys.modules)\n"
        "parse_time('last tuesday')\n"
        "print('dateparser' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True"]


# --- recall, select and forget take them --------------------------------------------------------


async def filled(memory: EpisodicMemory) -> dict[str, Episode]:
    """One episode a day, from 9 days ago to today, on the same topic."""
    stored = {}
    for days in range(9, -1, -1):
        when = datetime.fromtimestamp(NOW - days * DAY, UTC).isoformat()
        stored[f"d{days}"] = await memory.record(
            Episode(query=f"rotate the signing key, day {days}", outcome="success", timestamp=when)
        )
    return stored


@pytest.mark.anyio
async def test_recall_since_and_until_take_every_form(tmp_path: Path) -> None:
    async with FileMemoryProvider(tmp_path / "m.json") as backend:
        memory = EpisodicMemory(backend, clock=lambda: NOW, max_episodes=50)
        stored = await filled(memory)

        async def days(**period: Any) -> set[str]:
            found = await memory.recall("rotate the signing key", 20, **period)
            ids = {ep.id: name for name, ep in stored.items()}
            return {ids[ep.id] for ep in found}

        assert await days(since="yesterday", until="yesterday") == {"d1"}
        assert await days(since="3 days ago") == {"d3", "d2", "d1", "d0"}
        assert await days(until="last week") == {"d9", "d8", "d7", "d6", "d5", "d4", "d3"}
        assert await days(since="this week") == {"d2", "d1", "d0"}  # since Monday
        assert await days(since="2d", until=timedelta(hours=12)) == {"d2", "d1"}
        assert await days(since=date(2026, 11, 25), until="2026-11-26") == {"d7", "d6"}
        assert await days(until="2026-11-26T10:30Z") == {"d9", "d8", "d7"}  # until excludes
        # explain and the sync facade take the same.
        hits = await memory.explain("rotate the signing key", 20, since="monday", until="monday")
        assert [h.episode.id for h in hits] == [stored["d2"].id]
        with pytest.raises(ConfigurationError, match="until: 'whenever' is not a time"):
            await memory.recall("rotate", until="whenever")
        with pytest.raises(ConfigurationError, match="since: 'whenever' is not a time"):
            await memory.recall("rotate", since="whenever")


@pytest.mark.anyio
async def test_the_memory_reads_times_in_its_time_zone() -> None:
    # 10:30 UTC on 2 December; in Auckland (UTC+13) it is already 23:30 there.
    backend = InMemoryProvider()
    utc_memory = EpisodicMemory(backend, clock=lambda: NOW)
    auckland = EpisodicMemory(backend, clock=lambda: NOW, tz="Pacific/Auckland")
    assert str(auckland.tz) == "Pacific/Auckland"
    assert utc_memory.tz is UTC
    late = await utc_memory.record(
        Episode(query="renew the certificate", timestamp="2026-12-01T12:00:00Z")
    )  # 1 December in UTC, 2 December in Auckland
    assert [e.id for e in await utc_memory.recall("renew certificate", since="today")] == []
    assert [e.id for e in await auckland.recall("renew certificate", since="today")] == [late.id]
    assert [e.id for e in await auckland.select(before="today")] == []
    assert [e.id for e in await utc_memory.select(before="today")] == [late.id]
    # An ISO time without an offset is in the memory's zone too.
    assert await auckland.select(before="2026-12-02T01:00") == []
    assert [e.id for e in await auckland.select(before="2026-12-02T01:01")] == [late.id]


@pytest.mark.anyio
async def test_forget_before_a_phrase_deletes_only_what_it_names() -> None:
    memory = EpisodicMemory(InMemoryProvider(), clock=lambda: NOW, max_episodes=50)
    stored = await filled(memory)
    assert await memory.forget(before="last week", dry_run=True) == 0  # before 23 November
    assert await memory.forget(before="2026-11-27", dry_run=True) == 4  # 23 to 26 November
    assert await memory.forget(outcome="success", before="since monday") == 7
    left = {ep.id for ep in await memory.load()}
    assert left == {stored[f"d{n}"].id for n in (2, 1, 0)}
    with pytest.raises(ConfigurationError, match="before: 'the olden days' is not a time"):
        await memory.forget(before="the olden days")
    assert len(await memory.load()) == 3  # nothing deleted by the refused call


# --- history ----------------------------------------------------------------------------------


async def runs(memory: EpisodicMemory, outcomes: list[tuple[int, str]], task: str) -> list[Episode]:
    stored = []
    for days, outcome in outcomes:
        when = datetime.fromtimestamp(NOW - days * DAY, UTC).isoformat()
        stored.append(
            await memory.record(Episode(query=f"{task} ({days})", outcome=outcome, timestamp=when))
        )
    return stored


@pytest.mark.anyio
async def test_history_lists_runs_oldest_first_and_where_the_successes_broke() -> None:
    memory = EpisodicMemory(InMemoryProvider(), clock=lambda: NOW, max_episodes=100)
    sequence = [(9, "success"), (8, "success"), (7, "failure"), (6, "success"),
                (5, "success"), (4, "unknown"), (3, "failure"), (2, "partial"), (1, "failure")]  # fmt: skip
    stored = await runs(memory, sequence, "deploy to staging")
    await runs(memory, [(3, "success"), (2, "failure")], "refund a duplicate charge")
    history = await memory.history("deploy to staging")
    assert isinstance(history, History)
    assert [s.episode.id for s in history] == [e.id for e in stored]  # oldest first, nothing else
    assert history.broke is not None
    assert history.last_success is not None
    assert history.broke.episode.id == stored[6].id  # 3 days ago, after the success of day 5
    assert history.last_success.episode.id == stored[4].id
    assert history.failing
    assert history.failures_since == 3
    assert history.task == "deploy to staging"
    # A period narrows it: since the break, nothing worked and there is no success to break.
    recent = await memory.history("deploy to staging", since="3 days ago")
    assert [s.episode.outcome for s in recent] == ["failure", "partial", "failure"]
    assert recent.broke is None
    assert recent.last_success is None
    assert recent.failing
    before = await memory.history("deploy to staging", until="5 days ago")
    assert not before.failing
    assert before.broke is None
    assert before.last_success is not None
    assert before.last_success.episode.id == stored[4].id


@pytest.mark.anyio
async def test_a_grade_changes_the_history_and_an_expired_run_is_not_in_it() -> None:
    clock = [NOW]
    memory = EpisodicMemory(InMemoryProvider(), clock=lambda: clock[0], max_episodes=100)
    stored = await runs(
        memory,
        [(6, "success"), (5, "failure"), (4, "failure"), (3, "failure")],
        "run the nightly export",
    )
    assert (await memory.history("run the nightly export")).broke.episode.id == stored[1].id  # type: ignore[union-attr]
    # A test found later that the run of day 4 did work: the break moves to day 3.
    await memory.grade(stored[2].id, outcome="success", note="the retry job confirmed it")
    history = await memory.history("run the nightly export")
    assert [s.episode.outcome for s in history] == ["success", "failure", "success", "failure"]
    assert history.broke is not None
    assert history.broke.episode.id == stored[3].id
    # A run past its forget_after is never shown.
    await memory.record(
        Episode(
            query="run the nightly export (expiring)",
            outcome="success",
            timestamp=datetime.fromtimestamp(NOW - 3600, UTC).isoformat(),
            forget_after=datetime.fromtimestamp(NOW + 60, UTC).isoformat(),
        )
    )
    assert not (await memory.history("run the nightly export")).failing
    clock[0] = NOW + 120
    expired = await memory.history("run the nightly export")
    assert len(expired) == 4
    assert expired.failing


@pytest.mark.anyio
async def test_a_run_of_several_iterations_is_one_entry_with_its_last_outcome() -> None:
    memory = EpisodicMemory(InMemoryProvider(), clock=lambda: NOW, max_episodes=100)
    await runs(memory, [(5, "success")], "migrate the orders table")
    for n, outcome in enumerate(["failure", "failure", "success"]):
        when = datetime.fromtimestamp(NOW - 2 * DAY + n * 60, UTC).isoformat()
        await memory.record(
            Episode(
                query="migrate the orders table",
                outcome=outcome,
                run_id="run-7",
                reflection=f"attempt {n}",
                timestamp=when,
            )
        )
    await runs(memory, [(1, "failure")], "migrate the orders table")
    history = await memory.history("migrate the orders table")
    assert [(s.episode.outcome, s.iterations) for s in history] == [
        ("success", 1),
        ("success", 3),  # its failed attempts do not break the run of successes
        ("failure", 1),
    ]
    assert history.broke is not None
    assert history.broke.episode.outcome == "failure"
    assert history.failures_since == 1


@pytest.mark.anyio
async def test_history_of_a_task_never_run_never_worked_or_only_unknown() -> None:
    memory = EpisodicMemory(InMemoryProvider(), clock=lambda: NOW, max_episodes=100)
    assert list(await memory.history("anything at all")) == []
    await runs(memory, [(3, "failure"), (2, "failure")], "compile the firmware")
    await runs(memory, [(3, "unknown"), (2, "abandoned")], "label the invoices")
    never = await memory.history("compile the firmware")
    assert never.failing
    assert never.broke is None
    assert never.last_success is None
    assert never.failures_since == 2
    unknown = await memory.history("label the invoices")
    assert [s.episode.outcome for s in unknown] == ["unknown"]  # abandoned: as recall leaves it
    assert not unknown.failing
    assert unknown.broke is None
    with pytest.raises(ConfigurationError, match="task must be a string"):
        await memory.history(None)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_an_undated_episode_takes_its_place_in_the_log(tmp_path: Path) -> None:
    path = tmp_path / "legacy.json"
    async with FileMemoryProvider(path) as backend:
        memory = EpisodicMemory(backend, clock=lambda: NOW, namespace="ops")
        first, a, b, c = await runs(
            memory,
            [(7, "failure"), (5, "success"), (3, "failure"), (1, "failure")],
            "rebuild the search index",
        )
    # An old writer left two timestamps no one can read: the first episode's, and the third's.
    raw = path.read_text()
    for garbled in (first, b):
        stamp = garbled.timestamp
        assert raw.count(stamp) == 1, stamp
        raw = raw.replace(stamp, "last spring")
    path.write_text(raw)
    async with FileMemoryProvider(path) as backend:
        memory = EpisodicMemory(backend, clock=lambda: NOW, namespace="ops")
        history = await memory.history("rebuild the search index")
        # The third takes the time of the dated one before it; the first, no dated one before
        # it, is the oldest of all.
        assert [s.episode.id for s in history] == [first.id, a.id, b.id, c.id]
        assert history.broke is not None
        assert history.broke.episode.id == b.id
        assert history.failing
        assert history.failures_since == 2
        # A period never claims an episode of no known time; one that took a time is in it.
        assert {s.episode.id for s in await memory.history("rebuild the search index",
                                                            until="today")} == {a.id, b.id, c.id}  # fmt: skip
        since = await memory.history("rebuild the search index", since="4 days ago")
        assert [s.episode.id for s in since] == [c.id]  # b took day 5's time


# --- the command line -------------------------------------------------------------------------


def env(**extra: str) -> dict[str, str]:
    names = ("DEEPCREW_EPISODIC_STORE", "DEEPCREW_EPISODIC_NAMESPACE", "TZ")
    base = {k: v for k, v in os.environ.items() if k not in names}
    return {**base, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **extra}


def cli(*argv: str, script: bool = False, **extra: str) -> subprocess.CompletedProcess[str]:
    command = [str(SCRIPT)] if script else [sys.executable, "-m", "deepcrew_episodic"]
    return subprocess.run(
        [*command, *argv], capture_output=True, text=True, env=env(**extra), timeout=60,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip


def ago(days: float) -> str:
    return (datetime.now(UTC) - timedelta(days=days)).isoformat().replace("+00:00", "Z")


@pytest.fixture
def store(tmp_path: Path) -> str:
    """A JSON store: a deploy that worked 30 and 10 days ago, failed 3 days ago and today,
    and an unrelated refund."""
    lines = [
        {"query": "deploy to staging", "outcome": "success", "timestamp": ago(30)},
        {"query": "deploy to staging", "outcome": "success", "timestamp": ago(10)},
        {"query": "deploy to staging after the schema change", "outcome": "failure",
         "timestamp": ago(3), "reflection": "the migration lock timed out"},
        {"query": "refund the duplicate charge", "outcome": "success", "timestamp": ago(2)},
        {"query": "deploy to staging again", "outcome": "failure"},
    ]  # fmt: skip
    batch = tmp_path / "batch.jsonl"
    batch.write_text("".join(json.dumps(line) + "\n" for line in lines))
    path = str(tmp_path / "episodes.json")
    done = cli("--store", path, "record", "--file", str(batch))
    assert done.returncode == 0, done.stderr
    return path


def queries(output: str) -> list[str]:
    return [json.loads(output)[i]["query"] for i in range(len(json.loads(output)))]


def test_cli_recall_takes_since_and_until(store: str) -> None:
    def recalled(*period: str) -> list[str]:
        done = cli("--store", store, "recall", "deploy staging", "-k", "10", "--json", *period)
        assert done.returncode == 0, done.stderr
        return sorted(queries(done.stdout))

    assert recalled("--since", "yesterday") == ["deploy to staging again"]
    assert recalled("--since", "last 7 days") == [
        "deploy to staging after the schema change",
        "deploy to staging again",
    ]
    # The week three weeks ago ends 14 to 21 days ago, whatever the day is today.
    assert recalled("--until", "3 weeks ago") == ["deploy to staging"]
    assert recalled("--since", "2 weeks ago", "--until", "5d") == ["deploy to staging"]
    assert len(recalled()) == 4
    nothing = cli("--store", store, "recall", "deploy staging", "--until", "last year")
    assert (nothing.returncode, nothing.stdout) == (0, "")
    assert "relevant to 'deploy staging' in the period given" in nothing.stderr


def test_cli_timeline_takes_text_and_phrases(store: str) -> None:
    def shown(*argv: str) -> list[str]:
        done = cli("--store", store, "timeline", "--json", *argv, script=True)
        assert done.returncode == 0, done.stderr
        return queries(done.stdout)

    assert shown("STAGING", "--since", "2 weeks ago") == [
        "deploy to staging",
        "deploy to staging after the schema change",
        "deploy to staging again",
    ]
    assert shown("migration lock") == ["deploy to staging after the schema change"]  # a lesson
    assert shown("refund", "--until", "yesterday") == ["refund the duplicate charge"]
    assert shown("nothing like this") == []
    done = cli("--store", store, "timeline", "\u200b ")
    assert done.returncode == 1
    assert "holds no visible text" in done.stderr


def test_cli_history_says_when_it_started_failing(store: str) -> None:
    done = cli("--store", store, "history", "deploy to staging")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[2] for line in lines[:4]] == ["success", "success", "failure", "failure"]
    assert lines[-1].startswith("started failing: ")
    assert "2 failed runs since the last success" in lines[-1]
    as_json = cli("--store", store, "history", "deploy to staging", "--json")
    report = json.loads(as_json.stdout)
    runs_ = report["runs"]
    assert [r["outcome"] for r in runs_] == ["success", "success", "failure", "failure"]
    assert report["broke"]["id"] == runs_[2]["id"]
    assert report["last_success"]["id"] == runs_[1]["id"]
    assert (report["failing"], report["failures_since"]) == (True, 2)
    # A grade that says the schema-change deploy worked moves the break to today's.
    graded = cli("--store", store, "grade", runs_[2]["id"], "--outcome", "success")
    assert graded.returncode == 0, graded.stderr
    again = json.loads(cli("--store", store, "history", "deploy to staging", "--json").stdout)
    assert again["broke"]["id"] == runs_[3]["id"]
    assert again["runs"][2]["grades"][0]["outcome"] == "success"
    recent = cli("--store", store, "history", "deploy to staging", "--since", "yesterday")
    assert recent.stdout.splitlines()[-1] == "no run worked in the period given: 1 failed run"
    none = cli("--store", store, "history", "water the office plants")
    assert (none.returncode, none.stdout) == (0, "")
    assert "no past run" in none.stderr


def test_cli_reads_dates_in_the_zone_given(tmp_path: Path) -> None:
    path = str(tmp_path / "z.json")
    # 16:00 UTC on 28 February is 1 March, 01:00 in Tokyo.
    cli("--store", path, "record", "-q", "close the books", "--outcome", "success")
    batch = tmp_path / "b.jsonl"
    batch.write_text(json.dumps({"query": "close the month", "timestamp": "2026-02-28T16:00:00Z"}))
    assert cli("--store", path, "record", "--file", str(batch)).returncode == 0

    def listed(*argv: str, **extra: str) -> list[str]:
        done = cli("--store", path, "timeline", "--json", "--until", "2026-03-01", *argv, **extra)
        assert done.returncode == 0, done.stderr
        return queries(done.stdout)

    assert listed("--since", "2026-03-01") == []  # in UTC it was still February
    assert listed("--since", "2026-03-01", "--tz", "Asia/Tokyo") == ["close the month"]
    assert listed("--since", "2026-03-01", TZ="Asia/Tokyo") == ["close the month"]
    assert listed("--since", "2026-03-01", "--tz", "UTC", TZ="Asia/Tokyo") == []
    # A TZ this library cannot read is said, once, and UTC is used.
    odd = cli("--store", path, "timeline", "--since", "2026-03-01", TZ="JST-9")
    assert odd.returncode == 0
    assert odd.stderr.count("TZ='JST-9' is not a time zone name") == 1
    bad = cli("--store", path, "timeline", "--since", "today", "--tz", "Mars/Olympus")
    assert bad.returncode == 2
    assert "--tz: 'Mars/Olympus' is not a time zone" in bad.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["recall", "deploy", "--since", "someday"],
        ["recall", "deploy", "--until", "the olden days"],
        ["timeline", "--since", "5"],
        ["history", "deploy", "--until", "later"],
        ["forget", "--before", "whenever", "--dry-run"],
    ],
)
def test_cli_a_time_that_is_none_is_a_usage_error_naming_it(store: str, argv: list[str]) -> None:
    done = cli("--store", store, *argv)
    assert done.returncode == 2
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    option = next(a for a in argv if a.startswith("--"))
    assert f"{argv[0]} {option}: " in line
    assert "is not a time; give an ISO-8601 date or time" in line
    assert "last tuesday" in line


def test_cli_recall_with_iso_and_durations_does_not_load_dateparser(store: str) -> None:
    # The command a hook runs on every turn stays fast: dateparser loads for a phrase only.
    def imported(*period: str) -> set[str]:
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "deepcrew_episodic", "--store", store,
             "recall", "deploy", *period],
            capture_output=True, text=True, env=env(), timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return {line.split("|")[-1].strip() for line in done.stderr.splitlines() if "|" in line}

    fast = imported("--since", "30d", "--until", "2099-01-01T00:00Z")
    assert "deepcrew_episodic._recall" in fast  # the measurement saw the real path
    assert not {m for m in fast if m.startswith("dateparser")}
    assert "dateparser" in imported("--since", "last month")


def test_the_sync_facade_has_every_time_parameter() -> None:
    import inspect

    for name in ("recall", "explain", "history", "forget", "select"):
        mine = inspect.signature(getattr(SyncEpisodicMemory, name)).parameters
        theirs = inspect.signature(getattr(EpisodicMemory, name)).parameters
        assert list(mine) == list(theirs), name
    sync = SyncEpisodicMemory(InMemoryProvider(), tz="Asia/Tokyo", clock=lambda: NOW)
    try:
        assert str(sync.tz) == "Asia/Tokyo"
        sync.record(Episode(query="count the stock", timestamp="2026-12-01T16:00:00Z"))
        assert len(sync.recall("count stock", since="today")) == 1  # 2 Dec, 01:00 in Tokyo
        assert sync.recall("count stock", until="yesterday") == []
        sync.record(Episode(query="count the stock", outcome="success",
                            timestamp="2026-11-20T09:00:00Z"))  # fmt: skip
        history = sync.history("count the stock")
        assert [s.episode.outcome for s in history] == ["success", "unknown"]
        assert history.last_success is not None
        assert not history.failing
        assert len(sync.history("count the stock", since="this week")) == 1
    finally:
        sync.close()


def test_anyio_backends_agree() -> None:
    async def main() -> list[str]:
        memory = EpisodicMemory(InMemoryProvider(), clock=lambda: NOW)
        await runs(memory, [(2, "success"), (1, "failure")], "ship the release")
        history = await memory.history("ship the release", since="last 7 days")
        return [s.episode.outcome for s in history]

    assert anyio.run(main, backend="trio") == anyio.run(main) == ["success", "failure"]
