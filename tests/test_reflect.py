"""reflect_model: one lesson per recorded episode, NONE kept empty, failures never lose the episode.

The reflection model is the scripted server, reached by litellm over real HTTP.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import litellm
import pytest
from llm_server import Reply, ScriptedLLM

from deepcrew_episodic import Agent, ConfigurationError, Episode, EpisodicMemory, run_agent
from deepcrew_episodic._reflect import LESSON_CHARS, SYSTEM_PROMPT, parse_lesson
from deepcrew_episodic.providers import InMemoryProvider

pytestmark = pytest.mark.anyio

RUN = Episode(
    query="Deploy the search service",
    response="The deploy failed: the migration locked the users table.",
    outcome="failure",
    score=0.1,
    tools_used=["kubectl"],
)


def reflecting(llm: ScriptedLLM, timeout: float = 10.0) -> EpisodicMemory:
    return EpisodicMemory(
        InMemoryProvider(),
        reflect_model="openai/reflector",
        reflect_timeout=timeout,
        reflect_params={**llm.params, "max_retries": 0},
    )


async def test_the_lesson_is_stored_and_rendered(llm: ScriptedLLM) -> None:
    lesson = "Run the users-table migration before the deploy, off-peak."
    llm.script(Reply.text(lesson))
    memory = reflecting(llm)
    stored = await memory.record(dataclasses.replace(RUN))
    assert stored.reflection == lesson
    [loaded] = await memory.load()
    assert loaded.reflection == lesson
    assert f'lesson: "{lesson}"' in memory.render([loaded])

    [request] = llm.requests
    assert request.model == "reflector"
    assert not request.stream
    assert request.system_text == SYSTEM_PROMPT
    assert "Deploy the search service" in request.last_user_text
    assert "Outcome: failure (score 0.10)" in request.last_user_text
    assert "kubectl" in request.last_user_text


async def test_the_model_is_not_shown_a_score_that_contradicts_the_outcome(
    llm: ScriptedLLM,
) -> None:
    llm.script(Reply.text("Check the manifest first."))
    memory = reflecting(llm)
    await memory.record(dataclasses.replace(RUN, outcome="success", score=0.1))
    [request] = llm.requests
    assert "Outcome: success\n" in request.last_user_text
    assert "0.10" not in request.last_user_text


@pytest.mark.parametrize(
    "answer", ["NONE", "none.", ' "NONE" ', "NONE - nothing new here", "Lesson: NONE"]
)
async def test_none_leaves_the_reflection_empty(llm: ScriptedLLM, answer: str) -> None:
    llm.script(Reply.text(answer))
    memory = reflecting(llm)
    stored = await memory.record(dataclasses.replace(RUN))
    assert stored.reflection is None
    assert (await memory.load())[0].reflection is None
    assert memory.counters.reflection_failures == 0
    # render falls back to the response, never to a fabricated lesson
    assert "answer:" in memory.render([stored])


async def test_a_hanging_model_times_out_and_the_episode_is_kept(
    llm: ScriptedLLM, caplog: pytest.LogCaptureFixture
) -> None:
    llm.script(Reply.text("too late to matter", delay=30))
    memory = reflecting(llm, timeout=0.5)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="deepcrew_episodic"):
        stored = await memory.record(dataclasses.replace(RUN))
    assert time.monotonic() - started < 5
    assert stored.reflection is None
    assert [e.id for e in await memory.load()] == [stored.id]
    assert memory.counters.reflection_failures == 1
    assert any("reflection" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("status", [500, 429, 400])
async def test_a_failing_model_never_loses_the_episode(
    llm: ScriptedLLM, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    llm.script(Reply.error(status, "reflector unavailable"))
    memory = reflecting(llm)
    with caplog.at_level(logging.WARNING, logger="deepcrew_episodic"):
        stored = await memory.record(dataclasses.replace(RUN))
    assert stored.reflection is None
    assert len(await memory.load()) == 1
    assert memory.counters.reflection_failures == 1
    assert any("reflector unavailable" in r.getMessage() for r in caplog.records)


async def test_a_given_reflection_is_not_asked_for_again(llm: ScriptedLLM) -> None:
    memory = reflecting(llm)
    stored = await memory.record(dataclasses.replace(RUN, reflection="Mine."))
    assert stored.reflection == "Mine."
    assert llm.requests == []


async def test_runs_recorded_by_the_runner_are_reflected(llm: ScriptedLLM) -> None:
    llm.script(
        Reply.text("Rotated the key.", when=lambda r: r.model == "agent"),
        Reply.text("Keep two live keys while rotating.", when=lambda r: r.model == "reflector"),
    )
    memory = reflecting(llm)
    agent = Agent(
        name="ops",
        model="openai/agent",
        extra_params={**llm.params, "max_retries": 0},
        episodic_memory=memory,
    )
    result = await run_agent(agent, [{"role": "user", "content": "Rotate the API key"}])
    assert result.recorded[0].reflection == "Keep two live keys while rotating."
    assert [r.model for r in llm.requests] == ["agent", "reflector"]


async def test_a_crashed_run_is_reflected_too(llm: ScriptedLLM) -> None:
    llm.script(
        Reply.error(400, "context window exceeded", when=lambda r: r.model == "agent"),
        Reply.text("Trim the history before long runs.", when=lambda r: r.model == "reflector"),
    )
    memory = reflecting(llm)
    agent = Agent(
        name="ops",
        model="openai/agent",
        extra_params={**llm.params, "max_retries": 0},
        episodic_memory=memory,
    )
    with pytest.raises(litellm.BadRequestError, match="context window exceeded"):
        await run_agent(agent, [{"role": "user", "content": "Summarise the logs"}])
    [episode] = await memory.load()
    assert episode.outcome == "failure"
    assert episode.reflection == "Trim the history before long runs."
    assert "context window exceeded" in llm.requests[1].last_user_text


def test_parse_lesson() -> None:
    assert parse_lesson(None) is None
    assert parse_lesson("   ") is None
    assert parse_lesson("N/A") is None
    assert parse_lesson('Lesson: "Pin the base image."') == "Pin the base image."
    # "None" opening a real sentence is a lesson, not a refusal
    assert parse_lesson("None of the retries helped; check the quota first.") == (
        "None of the retries helped; check the quota first."
    )
    assert parse_lesson("Check\nthe   quota.") == "Check the quota."
    long = parse_lesson("word " * 200)
    assert long is not None
    assert len(long) <= LESSON_CHARS
    assert long.endswith("…")


@pytest.mark.parametrize("timeout", [0, -1.0, float("nan"), "10"])
def test_reflect_timeout_must_be_positive(timeout: object) -> None:
    with pytest.raises(ConfigurationError, match="reflect_timeout"):
        EpisodicMemory(InMemoryProvider(), reflect_model="m", reflect_timeout=timeout)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["**NONE**", "_NONE_", "`NONE`", "*None.*"])
def test_a_declined_lesson_in_markdown_is_still_declined(text: str) -> None:
    assert parse_lesson(text) is None
