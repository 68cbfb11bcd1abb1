"""Outcome sources: every episode and grade says where its outcome came from (a verifier, the
user, the agent's claim, a model judging), ranking follows that order under every intent, the
block says it in words, and ``stats`` warns when every success comes from no check.

The runner's paths run end to end: litellm over real HTTP to the scripted server.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from llm_server import Reply, ScriptedLLM

from deepcrew_episodic import (
    Agent,
    AgentResult,
    ConfigurationError,
    Episode,
    EpisodicHook,
    EpisodicMemory,
    Grade,
    InvalidEpisodeError,
    LLMVerifier,
    LoopConfig,
    ToolError,
    Verdict,
    run_agent,
)
from deepcrew_episodic.providers import InMemoryProvider, MemoryProvider
from deepcrew_episodic.testing._embedder import ConceptEmbedder

pytestmark = pytest.mark.anyio

DAY = 86400.0
QUERY = "Rotate the billing API key"
ASK = [{"role": "user", "content": QUERY}]


# --- the field ------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["verifier", "user", "agent", "judge", ""])
def test_a_source_round_trips_and_is_left_out_when_empty(source: str) -> None:
    episode = Episode(query="q", outcome="success", outcome_source=source)
    data = json.loads(episode.to_json())
    assert data.get("outcome_source", "") == source
    assert ("outcome_source" in data) == bool(source)
    assert Episode.from_json(episode.to_json()) == episode


@pytest.mark.parametrize("bad", ["tests", "Verifier", 1, None, ["user"]])
def test_a_wrong_source_is_a_typed_error_naming_the_choices(bad: Any) -> None:
    with pytest.raises(InvalidEpisodeError, match="outcome_source: expected one of 'verifier'"):
        Episode(query="q", outcome_source=bad)
    episode = Episode(query="q")
    with pytest.raises(InvalidEpisodeError, match="outcome_source"):
        episode.outcome_source = bad
    assert episode.outcome_source == ""


def test_another_tools_source_is_kept_shown_and_ranked_as_none(
    caplog: pytest.LogCaptureFixture,
) -> None:
    raw = json.dumps({"query": "q", "outcome": "success", "outcome_source": "ci-bot"})
    with caplog.at_level(logging.WARNING, "deepcrew_episodic"):
        episode = Episode.from_json(raw)
    assert episode.outcome_source == "ci-bot"  # as stored: nothing is lost
    assert episode.effective_source == ""  # read as no source: a success as verified
    assert episode.verified
    assert episode.source_label() == "ci-bot: unknown source"
    assert "ci-bot" not in episode.outcome_text()  # the block says only what it knows
    assert "ci-bot" in caplog.text


def test_another_tools_source_that_holds_a_token_is_logged_redacted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    token = "ghp_" + "Zq8" * 12  # a GitHub token fits the 40 characters of a source
    raw = json.dumps({"query": "q", "outcome": "success", "outcome_source": token})
    with caplog.at_level(logging.WARNING, "deepcrew_episodic"):
        episode = Episode.from_json(raw)
    assert episode.outcome_source == token  # kept as stored
    assert "outcome source" in caplog.text
    assert token not in caplog.text


@pytest.mark.parametrize("hostile", ["ci\x1b[31m", "a b", "x" * 41, "bell\x07"])
def test_a_stored_source_that_is_no_visible_token_falls_back_to_none(hostile: str) -> None:
    raw = json.dumps({"query": "q", "outcome": "failure", "outcome_source": hostile})
    episode = Episode.from_json(raw)
    assert episode.outcome_source == ""
    assert episode.outcome == "failure"


def test_deepcrew_ai_and_older_records_read_as_before() -> None:
    old = Episode.from_json(json.dumps({"query": "q", "outcome": "success"}))
    assert (old.outcome_source, old.effective_source, old.verified) == ("", "", True)
    claim = Episode.from_json(json.dumps({"query": "q", "outcome": "claimed_success"}))
    assert (claim.effective_source, claim.verified) == ("agent", False)


@pytest.mark.parametrize(
    ("outcome", "source", "verified", "words"),
    [
        ("success", "verifier", True, "worked (verified by a check)"),
        ("success", "user", True, "worked (confirmed by the user)"),
        ("success", "", True, "worked (verified)"),
        ("success", "agent", False, "claimed to work (unverified)"),
        ("claimed_success", "", False, "claimed to work (unverified)"),
        ("success", "judge", False, "a model judged it worked (unverified)"),
        ("failure", "verifier", True, "failed (verified by a check)"),
        ("failure", "user", True, "failed (reported by the user)"),
        ("failure", "agent", False, "the agent said it failed (unverified)"),
        ("failure", "judge", False, "a model judged it failed (unverified)"),
        ("partial", "judge", False, "a model judged it partly worked (unverified)"),
        ("unknown", "verifier", False, "outcome unknown"),
        ("abandoned", "verifier", False, "abandoned before it finished"),
    ],
)
def test_what_an_outcome_reads_as(outcome: str, source: str, verified: bool, words: str) -> None:
    episode = Episode(query="q", outcome=outcome, outcome_source=source)  # type: ignore[arg-type]
    assert episode.verified is verified
    assert episode.outcome_text() == words


def test_the_source_is_not_searched_as_text() -> None:
    from deepcrew_episodic._episode import stored_texts

    assert "verifier" not in stored_texts(Episode(query="q", outcome_source="verifier"))


async def write_as_another_tool(provider: InMemoryProvider, episode_id: str, source: str) -> None:
    """Rewrite the stored record of *episode_id* as another tool would write it: with an
    outcome source this library does not know."""
    for key in await provider.keys("episodic:"):
        value = await provider.retrieve(key)
        if value and value.startswith("{") and f'"id":"{episode_id}"' in value:
            data = json.loads(value)
            data["outcome_source"] = source
            await provider.store(key, json.dumps(data))
            return
    raise AssertionError(f"no stored record of {episode_id}")


async def test_a_record_from_another_tool_reads_in_place_everywhere() -> None:
    provider = InMemoryProvider()
    memory = EpisodicMemory(provider)
    stored = await memory.record(Episode(query="deploy the api", outcome="success"))
    await write_as_another_tool(provider, stored.id, "ci-bot")
    reader = EpisodicMemory(provider)
    (episode,) = await reader.recall("deploy the api")
    assert episode.outcome_source == "ci-bot"
    assert "worked (verified)" in reader.render([episode])
    assert "ci-bot" not in reader.render([episode])


# --- grades -----------------------------------------------------------------------------------


async def test_a_grade_keeps_its_source_and_its_verified_flag_follows() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    stored = await memory.record(Episode(query="deploy", outcome="claimed_success"))
    user = await memory.grade(stored.id, outcome="failure", source="user")
    assert (user.source, user.verified) == ("user", True)
    judge = await memory.grade(stored.id, outcome="success", source="judge")
    assert (judge.source, judge.verified) == ("judge", False)
    plain = await memory.grade(stored.id, outcome="success")
    assert (plain.source, plain.verified, plain.effective_source) == ("", True, "")
    claim = await memory.grade(stored.id, outcome="success", verified=False)
    assert (claim.source, claim.effective_source) == ("", "agent")
    again = [g.source for g in await EpisodicMemory(memory.backend).grades(stored.id)]
    assert again == ["user", "judge", "", ""]


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"source": "tests"}, "source: expected one of"),
        ({"source": "judge", "verified": True}, "contradicts"),
        ({"source": "verifier", "verified": False}, "contradicts"),
        ({"verified": "yes"}, "verified"),
    ],
)
async def test_a_grade_with_a_wrong_source_is_refused_and_nothing_is_written(
    options: dict[str, Any], match: str
) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    stored = await memory.record(Episode(query="deploy"))
    with pytest.raises(ConfigurationError, match=match):
        await memory.grade(stored.id, outcome="success", **options)
    assert await memory.grades(stored.id) == []


def test_a_stored_grade_reads_its_source_and_an_old_one_its_flag() -> None:
    old = Grade.from_json(
        json.dumps(
            {"episode": "e", "outcome": "success", "score": None, "verified": False}
        ).replace("}", ',"note":"","timestamp":""}')
    )
    assert (old.source, old.effective_source, old.rank) == ("", "agent", 2)
    sourced = Grade.from_dict({"outcome": "failure", "source": "verifier"}, "e")
    assert (sourced.verified, sourced.rank, sourced.reads_as) == (True, 0, ("failure", "verifier"))
    claimed = Grade.from_dict({"outcome": "success", "source": "agent"}, "e")
    assert (claimed.verified, claimed.reads_as) == (False, ("claimed_success", "agent"))


@pytest.mark.parametrize("hostile", ["ci\x1b[31m", "a b", "x" * 41, "bell\x07"])
async def test_a_stored_grade_whose_source_is_no_visible_token_still_grades(hostile: str) -> None:
    # As an episode's does: the source falls back to none, the grade is not lost.
    provider = InMemoryProvider()
    memory = EpisodicMemory(provider)
    stored = await memory.record(Episode(query="q", outcome="success"))
    await memory.grade(stored.id, outcome="failure", note="the nightly run failed")
    [key] = [k for k in await provider.keys("episodic:") if ":g:" in k]
    data = json.loads(await provider.retrieve(key) or "")
    await provider.store(key, json.dumps({**data, "source": hostile}))
    fresh = EpisodicMemory(provider)
    [grade] = await fresh.grades(stored.id)
    assert (grade.outcome, grade.source, grade.effective_source) == ("failure", "", "")
    [episode] = await fresh.load()
    assert episode.outcome == "failure"
    assert fresh.counters.corrupt_records == 0


@pytest.mark.parametrize(("source", "verified"), [("user", True), ("judge", False), ("", True)])
def test_a_stored_grade_without_its_verified_flag_takes_it_from_its_source(
    source: str, verified: bool
) -> None:
    # A writer that names the source (a newer version, another tool) may leave the flag out.
    raw = json.dumps({"episode": "e", "outcome": "failure", "source": source})
    grade = Grade.from_json(raw)
    assert (grade.outcome, grade.source, grade.verified) == ("failure", source, verified)


async def read_after(recorded: Episode, *grades: dict[str, Any]) -> Episode:
    memory = EpisodicMemory(InMemoryProvider())
    stored = await memory.record(recorded)
    for grade in grades:
        await memory.grade(stored.id, **grade)
    (episode,) = await memory.load()
    return episode


async def test_a_verifiers_grade_beats_a_newer_users() -> None:
    episode = await read_after(
        Episode(query="deploy"),
        {"outcome": "failure", "source": "verifier"},
        {"outcome": "success", "source": "user"},
    )
    assert (episode.outcome, episode.outcome_source) == ("failure", "verifier")


async def test_a_checked_grade_corrects_what_the_run_recorded() -> None:
    episode = await read_after(
        Episode(query="deploy", outcome="success", outcome_source="verifier"),
        {"outcome": "failure", "source": "user"},
    )
    assert (episode.outcome, episode.outcome_source) == ("failure", "user")


@pytest.mark.parametrize("source", ["agent", "judge"])
async def test_a_claim_or_a_judgement_never_overrides_a_checked_outcome(source: str) -> None:
    episode = await read_after(
        Episode(query="deploy", outcome="failure", outcome_source="user"),
        {"outcome": "success", "source": source},
    )
    assert (episode.outcome, episode.outcome_source) == ("failure", "user")


async def test_a_judgement_does_not_override_the_agents_claim_but_a_newer_claim_does() -> None:
    judged = await read_after(
        Episode(query="deploy", outcome="claimed_success"),
        {"outcome": "failure", "source": "judge"},
    )
    assert (judged.outcome, judged.effective_source) == ("claimed_success", "agent")
    claimed = await read_after(
        Episode(query="deploy", outcome="claimed_success"),
        {"outcome": "failure", "verified": False},
    )
    assert (claimed.outcome, claimed.effective_source) == ("failure", "agent")
    assert not claimed.verified


# --- ranking ----------------------------------------------------------------------------------


async def memory_at(clock: Any) -> EpisodicMemory:
    return EpisodicMemory(InMemoryProvider(), clock=clock)


@pytest.mark.parametrize("intent", ["any", "what_worked"])
async def test_an_older_verified_success_ranks_above_a_newer_used_claim(
    clock: Any, intent: str
) -> None:
    memory = await memory_at(clock)
    clock.now -= 3 * 365 * DAY
    checked = await memory.record(
        Episode(query="rotate the billing key", outcome="success", outcome_source="user")
    )
    clock.now += 3 * 365 * DAY
    claim = await memory.record(Episode(query="rotate the billing key", outcome="claimed_success"))
    for _ in range(50):  # the most reinforcement a use count can give
        await memory.used([claim.id])
    ranked = await memory.explain("rotate the billing key", intent=intent)
    assert [s.episode.id for s in ranked] == [checked.id, claim.id]
    assert ranked[1].uses == 50


@pytest.mark.parametrize("intent", ["any", "what_worked"])
async def test_among_equals_the_essays_order_of_sources(clock: Any, intent: str) -> None:
    memory = await memory_at(clock)
    order = [("verifier", "success"), ("user", "success"), ("agent", "success")]
    order += [("judge", "success")]
    for source, outcome in reversed(order):
        await memory.record(
            Episode(query="rotate the billing key", outcome=outcome, outcome_source=source)  # type: ignore[arg-type]
        )
    ranked = await memory.explain("rotate the billing key", 4, intent=intent)
    assert [s.episode.outcome_source for s in ranked] == [s for s, _ in order]
    weights = [s.outcome_weight for s in ranked]
    assert weights == sorted(weights, reverse=True)
    assert len(set(weights)) == 4


async def test_a_judged_failure_ranks_below_a_verified_one_when_failures_are_wanted(
    clock: Any,
) -> None:
    memory = await memory_at(clock)
    clock.now -= 400 * DAY
    seen = await memory.record(
        Episode(query="migrate the schema", outcome="failure", outcome_source="verifier")
    )
    clock.now += 400 * DAY
    judged = await memory.record(
        Episode(query="migrate the schema", outcome="failure", outcome_source="judge")
    )
    partial = await memory.record(Episode(query="migrate the schema", outcome="partial"))
    ranked = await memory.explain("migrate the schema", 3, intent="what_failed")
    assert [s.episode.id for s in ranked] == [seen.id, judged.id, partial.id]


async def test_a_grade_moves_an_episode_in_the_ranking(clock: Any) -> None:
    memory = await memory_at(clock)
    first = await memory.record(Episode(query="rotate the key", outcome="claimed_success"))
    clock.now += DAY
    second = await memory.record(Episode(query="rotate the key", outcome="claimed_success"))
    assert [e.id for e in await memory.recall("rotate the key")] == [second.id, first.id]
    await memory.grade(first.id, outcome="success", source="user")
    assert [e.id for e in await memory.recall("rotate the key")] == [first.id, second.id]


async def test_the_hybrid_ranking_weighs_sources_too(clock: Any) -> None:
    memory = EpisodicMemory(InMemoryProvider(), clock=clock, embedder=ConceptEmbedder())
    clock.now -= 3 * 365 * DAY
    checked = await memory.record(
        Episode(query="customer billed double", outcome="success", outcome_source="verifier")
    )
    clock.now += 3 * 365 * DAY
    claim = await memory.record(Episode(query="customer billed double", outcome="claimed_success"))
    ranked = await memory.explain("payment taken two times")  # the meaning, no shared word
    assert ranked.by == "hybrid"
    assert [s.episode.id for s in ranked] == [checked.id, claim.id]
    assert ranked[1].outcome_weight == pytest.approx(0.6)


async def test_sources_survive_every_store(provider: MemoryProvider) -> None:
    memory = EpisodicMemory(provider, namespace="sources")
    stored = await memory.record(
        Episode(query="deploy the api", outcome="failure", outcome_source="judge")
    )
    await memory.grade(stored.id, outcome="success", source="verifier", note="CI green")
    reopened = EpisodicMemory(provider, namespace="sources")
    (raw,) = await reopened.load(graded=False)
    assert raw.outcome_source == "judge"
    (grade,) = await reopened.grades(stored.id)
    assert (grade.source, grade.verified) == ("verifier", True)
    (episode,) = await reopened.load()
    assert (episode.outcome, episode.outcome_source) == ("success", "verifier")


# --- the block ----------------------------------------------------------------------------------


async def test_the_block_says_what_worked_what_failed_and_who_says_so() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    for outcome, source, lesson in [
        ("failure", "verifier", "revoke the old key last"),
        ("claimed_success", "", "it seemed to work"),
        ("success", "judge", ""),
    ]:
        await memory.record(
            Episode(
                query="rotate the billing key",
                response="Rotated.",
                outcome=outcome,  # type: ignore[arg-type]
                outcome_source=source,
                reflection=lesson or None,
            )
        )
    block = memory.render(await memory.recall("rotate the billing key", 3))
    assert len(block.splitlines()) == 5
    assert 'failed (verified by a check)] asked: "rotate the billing key" -> lesson: "revoke' in (
        block
    )
    assert "claimed to work (unverified)] asked" in block
    assert 'a model judged it worked (unverified)] asked: "rotate the billing key" -> answer' in (
        block
    )


# --- the runner, end to end ------------------------------------------------------------------


def make_agent(llm: ScriptedLLM, memory: EpisodicMemory, **options: Any) -> Agent:
    if options.get("distill_model"):
        options.setdefault("distill_params", {**llm.params, "max_retries": 0})
    return Agent(
        name="billing",
        model="openai/scripted",
        extra_params={**llm.params, "max_retries": 0},
        episodic_memory=memory,
        **options,
    )


def is_judge(request: Any) -> bool:
    return bool(request.model == "judge")


async def test_an_llm_verifiers_verdict_is_a_judges(llm: ScriptedLLM) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    llm.script(
        Reply.text("Created key 2, revoked key 1."),
        Reply.json({"score": 0.95, "issues": []}, when=is_judge),
    )
    judge = LLMVerifier("openai/judge", params={**llm.params, "max_retries": 0})
    agent = make_agent(llm, memory, loop_config=LoopConfig(verifier=judge))
    await run_agent(agent, ASK)
    [episode] = await memory.load()
    assert (episode.outcome, episode.outcome_source, episode.verified) == (
        "success",
        "judge",
        False,
    )


async def test_a_code_verifiers_verdict_is_a_check_and_a_judge_can_be_declared(
    llm: ScriptedLLM,
) -> None:
    async def has_key(query: str, result: AgentResult) -> Verdict:
        return Verdict(1.0 if "key 2" in result.text else 0.1)

    memory = EpisodicMemory(InMemoryProvider())
    llm.script(Reply.text("Created key 2."), Reply.text("Created key 2."))
    await run_agent(make_agent(llm, memory, loop_config=LoopConfig(verifier=has_key)), ASK)
    declared = LoopConfig(verifier=has_key, outcome_source="judge")
    await run_agent(make_agent(llm, memory, loop_config=declared), ASK)
    assert [(e.outcome, e.outcome_source) for e in await memory.load()] == [
        ("success", "verifier"),
        ("success", "judge"),
    ]
    with pytest.raises(ConfigurationError, match="outcome_source"):
        LoopConfig(verifier=has_key, outcome_source="user")


async def test_a_run_that_raised_is_a_failure_the_runner_saw(llm: ScriptedLLM) -> None:
    def broken() -> str:
        "Break."
        raise RuntimeError("disk full")

    memory = EpisodicMemory(InMemoryProvider())
    llm.script(Reply.tool_call("broken", {}))
    agent = make_agent(llm, memory, tools=[broken], tool_errors="raise")
    with pytest.raises(ToolError):
        await run_agent(agent, ASK)
    [episode] = await memory.load()
    assert (episode.outcome, episode.outcome_source) == ("failure", "verifier")


async def test_a_distilled_outcome_is_a_judges_and_a_verified_one_keeps_its_source(
    llm: ScriptedLLM,
) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    distilled = Reply.text(
        "TASK: rotate the billing API key\nAPPROACH: two keys\nOUTCOME: success\n"
        "LESSON: revoke the old key last"
    )
    llm.script(Reply.text("Done, it works."), distilled)
    await run_agent(make_agent(llm, memory, distill_model="openai/distiller"), ASK)

    async def passes(query: str, result: AgentResult) -> Verdict:
        return Verdict(0.1)

    llm.script(Reply.text("Done, it works."), distilled, Reply.text("again"), distilled)
    looped = LoopConfig(verifier=passes, max_iterations=1)
    await run_agent(
        make_agent(llm, memory, distill_model="openai/distiller", loop_config=looped), ASK
    )
    first, second = await memory.load()
    assert (first.outcome, first.outcome_source) == ("claimed_success", "judge")
    assert (second.outcome, second.outcome_source) == ("failure", "verifier")


@pytest.mark.parametrize(
    ("intent", "first"), [("what_failed", "failure"), ("what_worked", "success")]
)
async def test_the_agents_intent_reaches_recall(llm: ScriptedLLM, intent: str, first: str) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    await memory.record(
        Episode(query=QUERY, outcome="failure", outcome_source="verifier", reflection="F")
    )
    await memory.record(
        Episode(query=QUERY, outcome="success", outcome_source="verifier", reflection="S")
    )
    llm.script(Reply.text("ok"), Reply.text("ok"))
    # The agent's own intent, then the run's, which overrides it.
    await run_agent(make_agent(llm, memory, intent=intent), ASK)
    other = "what_worked" if intent == "what_failed" else "what_failed"
    await run_agent(make_agent(llm, memory, intent=intent), ASK, intent=other)
    shown = [r.system_text.split("\n")[2] for r in llm.requests[-2:]]
    words = {"failure": "failed (verified by a check)", "success": "worked (verified by a check)"}
    last = "success" if first == "failure" else "failure"
    assert words[first] in shown[0]
    assert words[last] in shown[1]


@pytest.mark.parametrize("bad", ["worked", "", None, 3])
async def test_a_wrong_intent_is_refused_on_the_agent_the_run_and_the_hook(bad: Any) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    with pytest.raises(ConfigurationError, match="intent must be one of 'any'"):
        Agent(name="a", model="openai/x", intent=bad)
    with pytest.raises(ConfigurationError, match="intent must be one of"):
        EpisodicHook(memory, intent=bad)
    if bad is not None:  # None is the run's default: the agent's intent
        with pytest.raises(ConfigurationError, match="intent must be one of"):
            await run_agent(Agent(name="a", model="openai/x"), ASK, intent=bad)


# --- the hook -------------------------------------------------------------------------------------


async def test_the_hook_records_the_source_it_is_given_and_its_own_for_errors() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    hook = EpisodicHook(memory, intent="what_failed")
    tested = await hook.after_run(QUERY, "ok", outcome="success", source="verifier")
    claimed = await hook.after_run(QUERY, "ok", outcome="claimed_success")
    unsaid = await hook.after_run(QUERY, "ok", outcome="failure")
    crashed = await hook.failed(QUERY, RuntimeError("boom"))
    assert [r.episode.outcome_source for r in (tested, claimed, unsaid, crashed)] == [  # type: ignore[union-attr]
        "verifier",
        "agent",
        "",
        "verifier",
    ]
    with pytest.raises(ConfigurationError, match="source: expected one of"):
        await hook.after_run(QUERY, "ok", outcome="success", source="ci")
    await hook.after_run(QUERY, "newest", outcome="success", source="verifier")
    # The newest episode is a success: only the hook's intent puts a failure first.
    plain = (await EpisodicHook(memory).before_run(ASK)).block.splitlines()[2]
    assert "worked (verified by a check)" in plain
    first = (await hook.before_run(ASK)).block.splitlines()[2]
    assert "failed (" in first
    assert "worked (" not in first


# --- stats --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("episodes", "warned"),
    [
        ([("success", "")] * 10, True),  # everything success, from nothing named
        ([("success", "judge")] * 9 + [("failure", "verifier")], True),
        ([("success", "")] * 9 + [("success", "verifier")], False),  # 10% checked
        ([("success", "")] * 8 + [("failure", "")] * 2, False),  # not nearly everything
        ([("success", "")] * 9, False),  # too few to tell
        ([("claimed_success", "")] * 10, False),  # the unwired warning says it
    ],
)
async def test_stats_warns_when_every_success_comes_from_no_check(
    episodes: list[tuple[str, str]], warned: bool
) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    for outcome, source in episodes:
        await memory.record(Episode(query="q", outcome=outcome, outcome_source=source))  # type: ignore[arg-type]
    stats = await memory.stats()
    assert any(w.startswith("everything is success") for w in stats.warnings) is warned
    assert len(stats.warnings) <= 1
    assert sum(stats.by_source.values()) == stats.total


async def test_stats_counts_sources_grades_applied_and_foreign_ones() -> None:
    provider = InMemoryProvider()
    memory = EpisodicMemory(provider)
    stored = await memory.record(Episode(query="q", outcome="claimed_success"))
    await memory.record(Episode(query="r", outcome="failure", outcome_source="verifier"))
    await memory.grade(stored.id, outcome="success", source="user")
    third = await memory.record(Episode(query="s", outcome="success", outcome_source="verifier"))
    await write_as_another_tool(provider, third.id, "ci-bot")
    stats = await EpisodicMemory(provider).stats()
    assert stats.by_source == {"user": 1, "verifier": 1, "": 1}
    assert stats.unknown_sources == 1


@pytest.mark.parametrize(
    ("given", "warned"),
    [
        ({}, False),
        ({"verified": True}, False),
        ({"source": "user"}, False),
        ({"source": "judge"}, True),
    ],
)
async def test_runs_graded_later_with_a_checked_grade_are_checked_successes(
    given: dict[str, Any], warned: bool
) -> None:
    # The warning's own advice is "grade runs later"; grade()'s default is a checked grade.
    memory = EpisodicMemory(InMemoryProvider())
    for n in range(10):
        stored = await memory.record(Episode(query=f"q{n}", outcome="unknown"))
        await memory.grade(stored.id, outcome="success", note="confirmed", **given)
    stats = await EpisodicMemory(memory.backend).stats()
    assert stats.by_outcome["success"] == 10
    assert any(w.startswith("everything is success") for w in stats.warnings) is warned
