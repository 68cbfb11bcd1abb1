"""Outcomes that carry information: the design essay's required tests, ported to this API
(``../shared/reference``: recency with similarity held constant, old-but-unique, intent,
immutability, empty recall, contradicting episodes), and the rules around them: one rule for a
score, claims below verified outcomes, reinforcement bounds, and the "not wired" warning.

The distillation tests of the essay (claimed downgrade, verified override, NONE lesson, trivial
run) go through litellm's real HTTP path in ``tests/test_distill.py`` and
``tests/test_outcomes_runner.py``; grades, uses and append-only storage on every provider are in
the conformance suite (``deepcrew_episodic.testing``).
"""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest
from conftest import Clock

from deepcrew_episodic import (
    ConfigurationError,
    Episode,
    EpisodicHook,
    EpisodicMemory,
    InvalidEpisodeError,
    outcome_for_score,
)
from deepcrew_episodic.providers import InMemoryProvider, SQLiteMemoryProvider

pytestmark = pytest.mark.anyio

DAY = 86400.0


async def test_recency_breaks_ties_with_similarity_held_constant(clock: Clock) -> None:
    memory = EpisodicMemory(InMemoryProvider(), clock=clock)
    clock.now -= 200 * DAY
    old = await memory.record(Episode(query="deploy the api", reflection="use staging first"))
    clock.now += 199 * DAY
    new = await memory.record(Episode(query="deploy the api", reflection="use staging first"))
    clock.now += DAY
    (top,) = await memory.recall("deploy the api", 1)
    assert top.id == new.id != old.id


async def test_an_old_but_unique_match_still_surfaces(clock: Clock) -> None:
    memory = EpisodicMemory(InMemoryProvider(), clock=clock)
    clock.now -= 900 * DAY
    await memory.record(Episode(query="configure the fax gateway", reflection="port 8081"))
    clock.now += 900 * DAY
    for i in range(20):
        await memory.record(Episode(query=f"unrelated task {i}"))
    (top,) = await memory.recall("configure the fax gateway", 1)
    assert "fax" in top.query  # the recency floor did its job


async def test_the_intent_selects_failures_and_successes_and_claims_rank_between() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    for outcome in ("success", "failure", "claimed_success", "abandoned", "partial"):
        await memory.record(Episode(query="migrate schema", outcome=outcome))
    worked = [e.outcome for e in await memory.recall("migrate schema", 5, intent="what_worked")]
    assert worked == ["success", "claimed_success", "partial", "failure"]  # abandoned: out
    failed = [e.outcome for e in await memory.recall("migrate schema", 5, intent="what_failed")]
    assert failed == ["failure", "partial", "claimed_success", "success"]
    asked = await memory.recall("migrate schema", 5, outcome=["abandoned", "failure"])
    assert sorted(e.outcome for e in asked) == ["abandoned", "failure"]


async def test_episodes_are_immutable_in_the_sqlite_schema(tmp_path: Path) -> None:
    path = tmp_path / "episodes.db"
    async with SQLiteMemoryProvider(path) as backend:
        memory = EpisodicMemory(backend)
        episode = await memory.record(Episode(query="x"))
        await memory.grade(episode.id, outcome="success")
    conn = sqlite3.connect(path)
    try:
        for key in ("episodic:default:e:1", "episodic:default:g:1"):
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                conn.execute("UPDATE kv SET value = 'y' WHERE key = ?", (key,))
        conn.execute("UPDATE kv SET value = '7' WHERE key = 'episodic:default:__seq__'")
        conn.execute("DELETE FROM kv WHERE key = 'episodic:default:e:1'")  # forget may delete
    finally:
        conn.close()


async def test_a_store_of_the_first_schema_gains_the_trigger(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    async with SQLiteMemoryProvider(path) as backend:
        await EpisodicMemory(backend).record(Episode(query="x"))
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER episodes_append_only")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    async with SQLiteMemoryProvider(path) as backend:
        assert [e.query for e in await EpisodicMemory(backend).load()] == ["x"]
    async with SQLiteMemoryProvider(tmp_path / "new.db") as backend:
        await EpisodicMemory(backend).record(Episode(query="x"))
    fresh = sqlite3.connect(tmp_path / "new.db")
    try:
        (current,) = fresh.execute("PRAGMA user_version").fetchone()
    finally:
        fresh.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone() == (current,)  # the newest
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute("UPDATE kv SET value = 'y' WHERE key = 'episodic:default:e:1'")
    finally:
        conn.close()


async def test_an_empty_recall_renders_nothing() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    await memory.record(Episode(query="deploy the api"))
    assert memory.render(await memory.recall("anything about nothing", 3)) == ""


async def test_contradicting_episodes_both_survive() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    await memory.record(Episode(query="where is the config", reflection="it is in /etc"))
    await memory.record(Episode(query="where is the config", reflection="it moved to ~/.config"))
    assert len(await memory.load()) == 2
    assert len(await memory.recall("where is the config")) == 2


# --- one rule for score and outcome ------------------------------------------------------------


@pytest.mark.parametrize(
    ("score", "outcome"),
    [(1.0, "success"), (0.7, "success"), (0.69, "partial"), (0.3, "partial"), (0.29, "failure")],
)
async def test_a_score_without_an_outcome_follows_one_rule_on_every_path(
    score: float, outcome: str
) -> None:
    assert outcome_for_score(score) == outcome
    memory = EpisodicMemory(InMemoryProvider())
    recorded = await memory.record(Episode(query="api path", score=score))
    hooked = await EpisodicHook(memory).after_run("hook path", "answer", score=score)
    target = await memory.record(Episode(query="graded later"))
    grade = await memory.grade(target.id, score=score)
    assert (recorded.outcome, hooked.episode and hooked.episode.outcome, grade.outcome) == (
        outcome,
        outcome,
        outcome,
    )
    explicit = await memory.record(Episode(query="given", score=score, outcome="failure"))
    assert explicit.outcome == "failure"  # an outcome given is kept


@pytest.mark.parametrize(
    ("outcome", "score", "shown"),
    [
        ("success", 0.1, None),
        ("claimed_success", 0.29, None),
        ("failure", 0.95, None),
        ("failure", 0.7, None),
        ("success", 0.3, 0.3),  # a loop with its own thresholds may place a success here
        ("partial", 0.9, 0.9),
        ("failure", 0.69, 0.69),
    ],
)
async def test_a_recorded_score_that_says_the_opposite_of_its_outcome_is_not_shown(
    outcome: str, score: float, shown: float | None
) -> None:
    backend = InMemoryProvider()
    # deepcrew-ai wrote such a pair; the drop-in promise reads it, and nothing rewrites it.
    await backend.write(
        {
            "episodic:old:0": json.dumps(
                {"query": "rotate the signing key", "outcome": outcome, "score": score}
            ),
            "episodic:old:__meta__": '{"count": 1, "next": 1}',
        }
    )
    memory = EpisodicMemory(backend, namespace="old")
    recorded = await memory.record(
        Episode(query="rotate the signing key again", outcome=outcome, score=score)  # type: ignore[arg-type]
    )
    assert recorded.score == score  # stored as given
    for episode in [*await memory.load(), *await memory.recall("rotate the signing key")]:
        assert (episode.outcome, episode.score) == (outcome, shown)
    for scored in await memory.explain("rotate the signing key"):
        assert scored.episode.score == shown
    block = memory.render(await memory.recall("rotate the signing key"))
    assert (f"score {score:.2f}" in block) is (shown is not None)
    assert [e.score for e in await memory.load(graded=False)] == [score, score]
    assert await backend.retrieve_many(["episodic:old:0"]) == [
        json.dumps({"query": "rotate the signing key", "outcome": outcome, "score": score})
    ]


@pytest.mark.parametrize("score", [7, -0.1, 1.01, 10**400])
async def test_a_score_outside_zero_to_one_is_refused_on_every_path(score: object) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    with pytest.raises(InvalidEpisodeError, match="score"):
        Episode(query="q", score=score)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="score"):
        await EpisodicHook(memory).after_run("q", "a", score=score)  # type: ignore[arg-type]
    episode = await memory.record(Episode(query="q"))
    with pytest.raises(ConfigurationError, match="score"):
        await memory.grade(episode.id, score=score)  # type: ignore[arg-type]
    assert len(await memory.load()) == 1


async def test_a_deepcrew_ai_score_outside_the_range_still_reads_in_place() -> None:
    backend = InMemoryProvider()
    await backend.write(
        {
            "episodic:old:0": '{"query": "legacy run", "outcome": "success", "score": 7}',
            "episodic:old:__meta__": '{"count": 1, "next": 1}',
        }
    )
    (episode,) = await EpisodicMemory(backend, namespace="old").load()
    assert (episode.query, episode.score) == ("legacy run", 7.0)


# --- reinforcement, runs, warnings ---------------------------------------------------------------


async def test_the_boost_grows_with_uses_and_never_passes_twenty_percent(clock: Clock) -> None:
    memory = EpisodicMemory(InMemoryProvider(), clock=clock)
    episode = await memory.record(Episode(query="restart the worker pool"))
    base = (await memory.explain("restart the worker pool"))[0].score
    seen, total = [], 0
    for uses in (1, 2, 4, 8, 100):  # 1 + min(0.2, ln(1 + uses) / 10)
        while total < uses:
            await memory.used(episode.id)
            total += 1
        seen.append((await memory.explain("restart the worker pool"))[0].score / base)
    assert seen == sorted(seen)
    assert seen[0] == pytest.approx(1 + math.log(2) / 10)
    assert seen[-2] == pytest.approx(1.2)
    assert seen[-1] == pytest.approx(1.2)


async def test_a_refinement_loop_fills_one_slot_not_three() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    for _ in range(3):
        await memory.record(
            Episode(query="summarise the incident report", run_id="r1", outcome="partial")
        )
    await memory.record(Episode(query="summarise the quarterly incident report"))
    await memory.record(Episode(query="summarise an incident report for the board"))
    found = await memory.recall("summarise the incident report", 3)
    assert len(found) == 3
    assert sum(1 for e in found if e.run_id == "r1") == 1


@pytest.mark.parametrize(
    ("outcomes", "warned"),
    [
        (["unknown"] * 9 + ["claimed_success"] * 3, True),
        (["unknown"] * 10 + ["success"] * 2, False),  # 83%: some signal is wired
        (["unknown"] * 9, False),  # too few to tell
        (["claimed_success"] * 12, True),
    ],
)
async def test_stats_warns_when_outcomes_carry_no_signal(outcomes: list[str], warned: bool) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    for i, outcome in enumerate(outcomes):
        await memory.record(Episode(query=f"task {i}", outcome=outcome))  # type: ignore[arg-type]
    warnings = (await memory.stats()).warnings
    assert bool(warnings) == warned
    if warned:
        assert "outcome signal not wired" in warnings[0]


async def test_no_boost_lifts_an_unwanted_outcome_over_a_wanted_one(clock: Clock) -> None:
    memory = EpisodicMemory(InMemoryProvider(), clock=clock)
    clock.now -= 900 * DAY
    wanted = await memory.record(Episode(query="rebuild the search index", outcome="success"))
    clock.now += 900 * DAY
    for outcome in ("failure", "claimed_success", "partial", "unknown", "abandoned"):
        unwanted = await memory.record(Episode(query="rebuild the search index", outcome=outcome))
        for _ in range(20):  # the largest boost
            await memory.used(unwanted.id)
    worked = await memory.recall("rebuild the search index", 1, intent="what_worked")
    assert [e.id for e in worked] == [wanted.id]


async def test_a_run_item_is_never_an_expired_filtered_or_abandoned_iteration(
    clock: Clock,
) -> None:
    from datetime import timedelta

    memory = EpisodicMemory(InMemoryProvider(), clock=clock, max_age=timedelta(days=30))
    clock.now -= 40 * DAY  # an iteration past max_age: never shown, nor its lesson
    await memory.record(
        Episode(query="deploy billing", run_id="r", outcome="failure", reflection="OLD-LESSON")
    )
    clock.now += 40 * DAY
    await memory.record(
        Episode(
            query="deploy billing", run_id="r", outcome="failure", tags=["prod"], reflection="L1"
        )
    )
    await memory.record(Episode(query="deploy billing", run_id="r", outcome="success"))
    await memory.record(Episode(query="deploy billing", run_id="r", outcome="abandoned"))
    (item,) = await memory.recall("deploy billing")
    assert item.outcome == "success"  # not the abandoned latest
    assert item.reflection == "Earlier attempts: L1"  # not the expired lesson
    assert "OLD-LESSON" not in memory.render([item])
    (failed,) = await memory.recall("deploy billing", outcome="failure")
    assert failed.tags == ["prod"]  # the filter holds for the run's item
    ranked = await memory.explain("deploy billing", intent="what_failed")
    assert [(s.episode.outcome, s.outcome_weight) for s in ranked] == [("success", 0.4)]


async def test_a_grade_never_moves_to_a_new_episode_that_reuses_the_id(clock: Clock) -> None:
    memory = EpisodicMemory(InMemoryProvider(), max_episodes=2, clock=clock)
    await memory.record(Episode(query="first try", id="ticket-1"))
    await memory.grade("ticket-1", outcome="failure")
    for i in range(2):  # the ring evicts ticket-1; its grade stays until a sweep
        clock.now += 1
        await memory.record(Episode(query=f"filler {i}"))
    clock.now += 1
    reused = await memory.record(Episode(query="second try", id="ticket-1", outcome="success"))
    assert [e.outcome for e in await memory.load() if e.id == reused.id] == ["success"]
    assert await memory.grades("ticket-1") == []


# --- a grade's outcome and its score ---------------------------------------------------------


async def test_a_grade_without_a_score_shows_no_recorded_score_on_any_read_path() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    episode = await memory.record(Episode(query="rotate the signing key", score=0.1))
    assert episode.outcome == "failure"  # what the score says
    await memory.grade(episode.id, outcome="success")
    (loaded,) = await memory.load()
    assert (loaded.outcome, loaded.score) == ("success", None)
    (recalled,) = await memory.recall("rotate the signing key")
    assert (recalled.outcome, recalled.score) == ("success", None)
    (explained,) = await memory.explain("rotate the signing key")
    assert explained.episode.score is None
    block = memory.render([recalled])
    assert "worked (verified)]" in block
    assert "0.10" not in block
    assert (await memory.select(outcome="success"))[0].score is None
    stats = await memory.stats()
    assert stats.by_outcome["success"] == 1


@pytest.mark.parametrize(
    ("recorded", "grade", "reads"),
    [
        # the grade's score and outcome together replace the recorded ones
        ({"score": 0.1}, {"score": 0.95}, ("success", 0.95)),
        ({"score": 0.9}, {"outcome": "failure"}, ("failure", None)),
        ({"score": 0.9}, {"outcome": "partial", "score": 0.5}, ("partial", 0.5)),
        ({"score": 0.5}, {"outcome": "success", "verified": False}, ("claimed_success", None)),
        ({"score": 0.5}, {"score": 0.8, "verified": False}, ("claimed_success", 0.8)),
        ({"score": 0.2}, {"outcome": "unknown"}, ("unknown", None)),
        # a claim never outweighs a verified outcome: the episode reads as recorded
        ({"outcome": "failure", "score": 0.1}, {"score": 0.9, "verified": False}, ("failure", 0.1)),
    ],
)
async def test_the_outcome_and_score_an_episode_reads_always_agree(
    recorded: dict[str, object], grade: dict[str, object], reads: tuple[str, float | None]
) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    episode = await memory.record(Episode(query="deploy billing", **recorded))  # type: ignore[arg-type]
    await memory.grade(episode.id, **grade)  # type: ignore[arg-type]
    (loaded,) = await memory.load()
    assert (loaded.outcome, loaded.score) == reads


@pytest.mark.parametrize(
    ("outcome", "score"),
    [
        ("success", 0.2),
        ("success", 0.5),
        ("claimed_success", 0.69),
        ("failure", 0.9),
        ("failure", 0.3),
        ("partial", 0.95),
        ("partial", 0.1),
        ("unknown", 0.5),
        ("abandoned", 0.0),
    ],
)
async def test_a_grade_whose_outcome_and_score_disagree_is_refused(
    outcome: str, score: float
) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    episode = await memory.record(Episode(query="deploy billing", score=0.5))
    with pytest.raises(ConfigurationError, match="disagree"):
        await memory.grade(episode.id, outcome=outcome, score=score)  # type: ignore[arg-type]
    assert await memory.grades(episode.id) == []  # nothing was written
    assert (await memory.load())[0].outcome == "partial"


def test_a_stored_grade_that_disagrees_reads_with_its_outcome_and_no_score() -> None:
    # Written by another tool, or before grade() refused such a pair.
    from deepcrew_episodic import Grade
    from deepcrew_episodic._grade import graded

    episode = Episode(
        query="deploy billing", score=0.1, id="ep-1", timestamp="2026-01-02T03:04:05Z"
    )
    stored = Grade(episode.id, "success", 0.1, stamp=episode.timestamp)
    shown = graded(episode, [Grade.from_json(stored.to_json())])
    assert (shown.outcome, shown.score) == ("success", None)
