"""The relevance floor: one shared incidental word is not relevance.

A support bot's log of 30 episodes (``support_bot_log.py``) and the questions its users ask in
their own words: with the floor, each returns the episode that answers it or nothing, never an
episode that shares one incidental word ("time", "app", "email", "never"); without it, those
fill the prompt. The floor only removes: the episodes above it come back in the same order
with the same scores, on the probe set and through the memory's reinforcement; ``explain``
lists what fell under it, as ``recall -v`` does. Set on the memory, per call, on the hook and
on ``Agent``.
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from llm_server import Reply, ScriptedLLM
from recall_probes import load_episodes, load_probes
from support_bot_log import LOG, QUESTIONS, episodes

from deepcrew_episodic import (
    Agent,
    ConfigurationError,
    EpisodicHook,
    EpisodicMemory,
    LiteLLMEmbedder,
    SyncEpisodicMemory,
    run_agent,
)
from deepcrew_episodic._recall import MIN_RELEVANCE
from deepcrew_episodic.cli import main
from deepcrew_episodic.providers import FileMemoryProvider, InMemoryProvider

pytestmark = pytest.mark.anyio

ANSWERED = [(q, key) for q, key in QUESTIONS if key is not None]
UNANSWERED = [q for q, key in QUESTIONS if key is None]


async def support_bot(**options: Any) -> EpisodicMemory:
    now = time.time()  # one clock for every call: recency does not move between them
    memory = EpisodicMemory(InMemoryProvider(), clock=lambda: now, **options)
    for _, episode in episodes(now):
        await memory.record(episode)
    return memory


def test_the_log_is_a_support_bots() -> None:
    assert len(LOG) == 30
    assert len({key for key, *_ in LOG}) == 30
    assert len(ANSWERED) >= 6
    assert {"time", "app", "email", "never"} <= {
        word for question, _ in QUESTIONS for word in question.replace("emails", "email").split()
    }


# --- the support bot ----------------------------------------------------------------------------


async def test_a_question_recalls_its_answer_or_nothing() -> None:
    memory = await support_bot()
    answered = 0
    for question, key in QUESTIONS:
        found = await memory.explain(question)
        assert [s.episode.id for s in found] in ([], [key]), (question, found)
        answered += len(found)
        for scored in found:
            assert len(scored.matched) >= 2  # no single incidental word
    assert answered >= 2  # nothing at all would pass the check above
    for question in UNANSWERED:
        assert await memory.recall(question) == []


async def test_the_charged_twice_question_is_not_answered_by_timing_out() -> None:
    memory = await support_bot()
    unfloored = await memory.explain("got charged two times this month", min_relevance=0)
    assert unfloored[0].episode.id != "charged-twice"
    assert unfloored[0].matched == ("time",)  # the symptom: "times" met "timing"
    floored = await memory.explain("got charged two times this month")
    assert list(floored) == []
    assert floored.min_relevance == MIN_RELEVANCE
    assert [s.episode.id for s in floored.under_floor] == [s.episode.id for s in unfloored]
    for scored in floored.under_floor:
        assert scored.relevance < MIN_RELEVANCE
        assert scored.matched == ("time",)


async def test_without_the_floor_incidental_words_fill_the_prompt() -> None:
    memory = await support_bot(min_relevance=0)
    incidental = 0
    for question, key in QUESTIONS:
        for scored in await memory.explain(question):
            if scored.episode.id != key:
                incidental += 1
                assert len(scored.matched) == 1, (question, scored.why())
    assert incidental >= 15  # what the floor keeps out


async def test_the_right_episode_comes_first_when_it_shares_more_than_one_word() -> None:
    memory = await support_bot()
    for question, key in [
        ("the reset link never showed up in my inbox", "reset-email"),
        ("your emails end up in my junk mail", "spam-folder"),
    ]:
        [first] = await memory.recall(question)
        assert first.id == key
        unfloored = await memory.recall(question, min_relevance=0)
        assert unfloored[0].id == key
        assert len(unfloored) == 3  # the other two matched one word


# --- the floor only removes -----------------------------------------------------------------------


async def probe_memory() -> EpisodicMemory:
    now = time.time()  # one clock for every call: recency does not move between them
    memory = EpisodicMemory(
        InMemoryProvider(), max_episodes=1000, min_relevance=0, clock=lambda: now
    )
    for _, episode in load_episodes(now):
        await memory.record(episode)
    # reinforcement: the ranking goes through the memory's boosted, re-fetching path
    ids = [key for key, _ in load_episodes(now)]
    for key in ids[::7]:
        await memory.used(key)
    return memory


@pytest.mark.parametrize("floor", [0.1, MIN_RELEVANCE, 0.2, 0.35, 1.0])
async def test_the_floor_only_removes_episodes_under_it(floor: float) -> None:
    memory = await probe_memory()
    for probe in load_probes():
        for k in (1, 3):
            everything = await memory.explain(probe.query, 400, intent=probe.intent)
            floored = await memory.explain(probe.query, k, intent=probe.intent, min_relevance=floor)
            kept = [s for s in everything if s.relevance >= floor][:k]
            assert [(s.episode.id, s.score) for s in floored] == [
                (s.episode.id, s.score) for s in kept
            ], probe.id
            assert floored.min_relevance == floor
            top = list(everything)[:k]
            assert [(s.episode.id, s.relevance) for s in floored.under_floor] == [
                (s.episode.id, s.relevance) for s in top if s.relevance < floor
            ], probe.id


@pytest.mark.parametrize("floor", [MIN_RELEVANCE, 0.3])
async def test_with_an_embedder_the_floor_only_removes_too(llm: ScriptedLLM, floor: float) -> None:
    # hash-64 vectors (shared words meet, through the scripted server): a meaning part on
    # many episodes, so the combined relevance, not the keyword part, is what is floored
    now = time.time()
    memory = EpisodicMemory(
        InMemoryProvider(),
        max_episodes=1000,
        min_relevance=0,
        clock=lambda: now,
        embedder=LiteLLMEmbedder("openai/hash-64", **llm.params),
    )
    for _, episode in load_episodes(now):
        await memory.record(episode)
    meant = 0
    for probe in load_probes():
        everything = await memory.explain(probe.query, 400, intent=probe.intent)
        assert everything.by == "hybrid"
        meant += sum(1 for s in everything if s.meaning > 0)
        floored = await memory.explain(probe.query, 3, intent=probe.intent, min_relevance=floor)
        kept = [s for s in everything if s.relevance >= floor][:3]
        assert [(s.episode.id, s.score) for s in floored] == [
            (s.episode.id, s.score) for s in kept
        ], probe.id
        assert [s.episode.id for s in floored.under_floor] == [
            s.episode.id for s in list(everything)[:3] if s.relevance < floor
        ], probe.id
    assert meant > 100


async def test_the_probe_keeps_its_answers_and_drops_its_near_misses() -> None:
    memory = EpisodicMemory(InMemoryProvider(), max_episodes=1000)
    for _, episode in load_episodes(time.time()):
        await memory.record(episode)
    near_misses = [p for p in load_probes() if p.kind == "near-miss"]
    assert near_misses
    for probe in near_misses:
        ranking = await memory.explain(probe.query)
        assert list(ranking) == [], probe.id
        assert ranking.under_floor, probe.id  # they shared a word: under the floor, said so


async def test_under_the_floor_never_lists_what_the_filters_leave_out() -> None:
    now = time.time()
    memory = EpisodicMemory(InMemoryProvider(), clock=lambda: now, max_age=timedelta(days=20))
    for _, episode in episodes(now):  # one a day: the ten oldest are past max_age
        await memory.record(episode)
    question = "got charged two times this month"
    unfiltered = await memory.explain(question, 10, min_relevance=0)
    assert [s.episode.id for s in unfiltered] == ["calendar-offset"]  # "time"; the rest expired
    ranking = await memory.explain(question, 10)
    assert [s.episode.id for s in ranking.under_floor] == ["calendar-offset"]
    only_billing = await memory.explain(question, 10, tags=["billing"])
    assert only_billing.under_floor == ()  # charged-twice matched "charg", but has expired
    ranking.under_floor[0].episode.query = "changed"  # copies: the cache is not touched
    again = await memory.explain(question, 10)
    assert again.under_floor[0].episode.query != "changed"


async def test_one_item_per_run_under_the_floor_too() -> None:
    memory = EpisodicMemory(InMemoryProvider(), min_relevance=0.3)
    from deepcrew_episodic import Episode

    for i in range(3):
        await memory.record(
            Episode(
                query=f"Reports page timing out, try {i}",
                reflection="Exports over 50k rows time out; use the scheduled export.",
                run_id="run-1",
                outcome="failure" if i < 2 else "success",
            )
        )
    ranking = await memory.explain("what time is it in the reports office", 5)
    assert list(ranking) == []
    assert len(ranking.under_floor) == 1


async def test_a_much_used_episode_under_the_floor_is_listed_however_old() -> None:
    # Reinforcement lifts it into the top k without the floor: it is what the floor kept out,
    # even behind dozens of newer, unused episodes of the same relevance.
    from deepcrew_episodic import Episode

    now = time.time()
    memory = EpisodicMemory(InMemoryProvider(), clock=lambda: now)
    used = await memory.record(
        Episode(
            query="billing export csv columns shifted left",
            timestamp=datetime.fromtimestamp(now - 5 * 86400, UTC).isoformat(),
        )
    )
    for n in range(40):
        await memory.record(Episode(query=f"billing export csv columns shifted right {n}"))
    for _ in range(100):
        await memory.used(used.id)
    everything = await memory.explain("billing", 3, min_relevance=0)
    assert everything[0].episode.id == used.id
    ranking = await memory.explain("billing", 3, min_relevance=0.3)
    assert list(ranking) == []
    assert [s.episode.id for s in ranking.under_floor] == [s.episode.id for s in everything]


async def test_a_phase_under_the_floor_is_listed_beside_another_phase_recalled() -> None:
    # The phases of one run are items of their own: one recalled does not hide another that
    # fell under the floor.
    from deepcrew_episodic import Episode

    memory = EpisodicMemory(InMemoryProvider())
    plan = await memory.record(
        Episode(query="deploy the search service", run_id="run-1", phase="plan")
    )
    check = await memory.record(
        Episode(
            query="check the latency dashboard counters after the deploy window",
            run_id="run-1",
            phase="verify",
        )
    )
    everything = await memory.explain("deploy the search service", 5, min_relevance=0)
    assert [s.episode.id for s in everything] == [plan.id, check.id]
    ranking = await memory.explain("deploy the search service", 5)
    assert [s.episode.id for s in ranking] == [plan.id]
    assert [s.episode.id for s in ranking.under_floor] == [check.id]


# --- where the floor is set ---------------------------------------------------------------------


BAD_FLOORS = [-0.01, 1.5, math.nan, math.inf, "0.2", True, None]


@pytest.mark.parametrize("value", BAD_FLOORS)
async def test_a_bad_floor_is_refused_by_name(value: object) -> None:
    with pytest.raises(ConfigurationError, match="min_relevance"):
        EpisodicMemory(InMemoryProvider(), min_relevance=value)  # type: ignore[arg-type]
    memory = await support_bot()
    if value is not None:  # None: the memory's floor
        with pytest.raises(ConfigurationError, match="min_relevance"):
            await memory.recall("refund", min_relevance=value)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="min_relevance"):
            await memory.explain("refund", min_relevance=value)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="min_relevance"):
            EpisodicHook(memory, min_relevance=value)  # type: ignore[arg-type]
        with pytest.raises(ConfigurationError, match="min_relevance"):
            Agent(name="a", model="openai/x", min_relevance=value)  # type: ignore[arg-type]
    assert len(await memory.load()) == 30  # nothing stored was touched


async def test_the_floor_set_on_the_memory_and_per_call() -> None:
    question = "I never use the app on weekends"
    strict = await support_bot(min_relevance=0.3)
    loose = await support_bot(min_relevance=0)
    assert await strict.recall(question) == []
    assert len(await loose.recall(question)) == 3
    assert len(await strict.recall(question, min_relevance=0)) == 3
    assert await loose.recall(question, min_relevance=MIN_RELEVANCE) == []
    assert (await strict.explain(question)).min_relevance == 0.3
    # a question that matches every word of its episode passes any floor
    assert [e.id for e in await strict.recall("VAT number missing on the invoice")] == [
        "vat-missing"
    ]


def test_the_sync_memory_takes_the_floor(tmp_path: Path) -> None:
    with SyncEpisodicMemory(FileMemoryProvider(tmp_path / "e.json"), min_relevance=0.2) as memory:
        for _, episode in episodes(time.time()):
            memory.record(episode)
        question = "the app keeps closing right after I open it"
        assert memory.recall(question) == []
        assert len(memory.recall(question, min_relevance=0)) == 3
        ranking = memory.explain(question)
        assert ranking.min_relevance == 0.2
        assert len(ranking.under_floor) == 3
        with pytest.raises(ConfigurationError, match="min_relevance"):
            memory.recall(question, min_relevance=2)


async def test_the_hook_leaves_a_weak_match_out_of_the_block() -> None:
    memory = await support_bot()
    messages = [{"role": "user", "content": "got charged two times this month"}]
    floored = await EpisodicHook(memory).before_run(messages)
    assert floored.count == 0
    assert floored.messages == messages
    loose = await EpisodicHook(memory, min_relevance=0).before_run(messages)
    assert loose.count == 3
    assert "Reports page timing out" in loose.block
    strict = await support_bot(min_relevance=0)
    assert (await EpisodicHook(strict, min_relevance=MIN_RELEVANCE).before_run(messages)).count == 0


async def test_the_agent_passes_its_floor_to_the_recall(llm: ScriptedLLM) -> None:
    ask = [{"role": "user", "content": "got charged two times this month"}]
    llm.fallback = Reply.text("Let me look at your invoices.")
    params = {**llm.params, "max_retries": 0}
    default = Agent(
        name="bot",
        model="openai/scripted",
        extra_params=params,
        episodic_memory=await support_bot(),
    )
    result = await run_agent(default, ask)
    assert result.episodes_recalled == 0
    assert "## Relevant past experience" not in llm.requests[-1].system_text
    loose = Agent(
        name="bot",
        model="openai/scripted",
        extra_params=params,
        episodic_memory=await support_bot(),
        min_relevance=0,
    )
    result = await run_agent(loose, ask)
    assert result.episodes_recalled == 3
    assert "Two-factor codes are rejected" in llm.requests[-1].system_text  # matched "time"


# --- recall -v --------------------------------------------------------------------------------


def test_recall_verbose_marks_what_fell_under_the_floor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "bot.json"
    with SyncEpisodicMemory(FileMemoryProvider(store)) as memory:
        for _, episode in episodes(time.time()):
            memory.record(episode)
    question = "got charged two times this month"
    assert main(["--store", str(store), "recall", question, "-v"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"under the relevance floor ({MIN_RELEVANCE:g}), not recalled:")
    assert "Reports page timing out for large accounts" in out
    assert out.count("(under the floor): matched time;") == 3
    assert "Two-factor codes are rejected" in out
    assert main(["--store", str(store), "recall", question]) == 0
    assert capsys.readouterr().out == ""  # without -v: nothing recalled, nothing listed
    assert main(["--store", str(store), "recall", question, "--min-relevance", "0"]) == 0
    assert "1. " in capsys.readouterr().out
    assert main(["--store", str(store), "recall", question, "--min-relevance", "1.5"]) == 2
    assert "relevance floor is from 0 to 1" in capsys.readouterr().err


def test_recall_verbose_says_who_gave_the_outcome_of_what_fell_under_the_floor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # As the results say it: a claim is not shown as a plain success, a grade is marked.
    from deepcrew_episodic import Episode

    store = tmp_path / "bot.json"
    with SyncEpisodicMemory(FileMemoryProvider(store)) as memory:
        claimed = memory.record(
            Episode(query="Reports page timing out for large accounts", outcome="claimed_success")
        )
        graded = memory.record(
            Episode(query="Calendar shows the wrong time zone to guests", outcome="success")
        )
        memory.grade(graded.id, outcome="failure", source="user")
    assert claimed.outcome == "claimed_success"
    assert main(["--store", str(store), "recall", "got charged two times this month", "-v"]) == 0
    out = capsys.readouterr().out
    assert "claimed_success (agent)  Reports page timing out" in out
    assert "failure (user, graded)  Calendar shows the wrong time zone" in out


# --- with an embedder: the floor applies to the combined relevance ------------------------------


@pytest.mark.slow
@pytest.mark.xdist_group("embedding-models")
async def test_with_meaning_the_right_episode_comes_first(llm: ScriptedLLM) -> None:
    embedder = LiteLLMEmbedder("openai/minilm", **llm.params)
    await embedder.embed(["load the model"])  # before the records: loading takes seconds
    memory = await support_bot(embedder=embedder)
    found = await memory.explain("got charged two times this month")
    assert found.by == "hybrid"
    assert found[0].episode.id == "charged-twice"
    for question, key in ANSWERED:
        ranking = await memory.explain(question)
        assert key in [s.episode.id for s in ranking], question
        for scored in ranking:
            assert scored.relevance >= MIN_RELEVANCE
            assert scored.meaning > 0 or len(scored.matched) >= 2, (question, scored.why())
    assert await memory.recall("what time does your office open") == []
    # the floor applies to the combined relevance, and only removes
    for question, _ in QUESTIONS:
        everything = await memory.explain(question, 30, min_relevance=0)
        floored = await memory.explain(question, 3)
        kept = [s for s in everything if s.relevance >= MIN_RELEVANCE][:3]
        assert [(s.episode.id, s.score) for s in floored] == [
            (s.episode.id, s.score) for s in kept
        ], question
        assert [s.episode.id for s in floored.under_floor] == [
            s.episode.id for s in list(everything)[:3] if s.relevance < MIN_RELEVANCE
        ], question
