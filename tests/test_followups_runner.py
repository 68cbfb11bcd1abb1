"""A grading model and the runner: the user's next message grades the run before it, with every
model call through litellm's real HTTP path to the scripted server (asyncio only: litellm is)."""

from __future__ import annotations

from typing import Any

import pytest
from llm_server import Reply, ScriptedLLM
from test_followups import ANSWER, TASK, ask, turn

from deepcrew_episodic import (
    Agent,
    ConfigurationError,
    EpisodicHook,
    EpisodicMemory,
    EventType,
    FollowUp,
    FollowUpModel,
    run_agent,
    stream_agent,
)
from deepcrew_episodic.providers import InMemoryProvider

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --- a grading model, through litellm ------------------------------------------------------


async def test_a_grading_model_reads_the_follow_up(llm: ScriptedLLM) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    model = FollowUpModel("openai/grader", **llm.params, max_retries=0)
    hook = EpisodicHook(memory, grade_followups=model)
    _, first = await turn(hook, "c", ask(TASK), ANSWER)
    llm.script(Reply.json({"verdict": "failure", "new_request": False}))
    recalled, retry = await turn(hook, "c", ask(TASK, "hmm, it still hangs"), "Retry.")
    assert recalled.followup == FollowUp("failure", False, by="openai/grader")
    assert recalled.grade.episode_id == first.id
    assert retry.episode.query == TASK
    [request] = llm.requests
    assert request.body["model"] == "grader"
    assert f"Previous task: {TASK}" in request.last_user_text
    assert f"Previous answer: {ANSWER}" in request.last_user_text
    assert "The user's next message: hmm, it still hangs" in request.last_user_text


@pytest.mark.parametrize(
    "reply",
    [
        Reply.text("It sounds like it worked."),
        Reply.json({"verdict": "fixed"}),
        Reply.error(500, "grader overloaded"),
    ],
)
async def test_a_grading_model_that_fails_grades_nothing(llm: ScriptedLLM, reply: Reply) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    hook = EpisodicHook(
        memory, grade_followups=FollowUpModel("openai/grader", **llm.params, max_retries=0)
    )
    await turn(hook, "c", ask(TASK), ANSWER)
    llm.script(reply)
    recalled, recorded = await turn(hook, "c", ask(TASK, "thanks, that worked"), "Glad.")
    assert (recalled.followup, recalled.grade) == (None, None)
    assert recorded.episode is not None  # not read: an ordinary turn, recorded
    assert memory.counters.grading_failures == 1


async def test_a_grading_model_that_hangs_is_given_up(llm: ScriptedLLM) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    model = FollowUpModel("openai/grader", timeout=0.5, **llm.params, max_retries=0)
    hook = EpisodicHook(memory, grade_followups=model)
    await turn(hook, "c", ask(TASK), ANSWER)
    llm.script(Reply.json({"verdict": "success"}, delay=5))
    recalled, _ = await turn(hook, "c", ask(TASK, "thanks, that worked"), "Glad.")
    assert recalled.grade is None
    assert memory.counters.grading_failures == 1


# --- the runner -----------------------------------------------------------------------------


def make_agent(llm: ScriptedLLM, memory: EpisodicMemory, **options: Any) -> Agent:
    return Agent(
        name="support",
        model="openai/scripted",
        extra_params={**llm.params, "max_retries": 0},
        episodic_memory=memory,
        **options,
    )


async def test_run_agent_grades_the_conversations_previous_run(llm: ScriptedLLM) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    agent = make_agent(llm, memory, grade_followups=True)
    llm.script(Reply.text(ANSWER))
    first = await run_agent(agent, ask(TASK), conversation_id="t-1")
    [episode] = first.recorded
    assert episode.conversation_id == "t-1"

    llm.script(Reply.text("Then use the background export."))
    retry = await run_agent(agent, ask(TASK, "Still broken."), conversation_id="t-1")
    # The retry's recall already saw the failure; its episode is a run of the task.
    assert "; failed (reported by the user)] asked: " in llm.requests[-1].system_text
    [again] = retry.recorded
    assert (again.query, again.conversation_id) == (TASK, "t-1")

    llm.script(Reply.text("Glad it works!"))
    thanks = await run_agent(agent, ask(TASK, "x", "That worked, thanks!"), conversation_id="t-1")
    assert thanks.text == "Glad it works!"
    assert thanks.recorded == []  # a thank-you is no run
    outcomes = {e.id: e.outcome for e in await memory.load()}
    assert outcomes == {episode.id: "failure", again.id: "success"}


async def test_run_agent_with_a_grading_model(llm: ScriptedLLM) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    model = FollowUpModel("openai/grader", **llm.params, max_retries=0)
    agent = make_agent(llm, memory, grade_followups=model)
    llm.script(Reply.text(ANSWER))
    first = await run_agent(agent, ask(TASK), conversation_id="t-2")
    llm.script(
        Reply.json({"verdict": "success", "new_request": True}),  # the grader, first
        Reply.text("Reports > Invoices > Export."),  # then the agent
    )
    second = await run_agent(
        agent, ask(TASK, "Sorted! And invoices?"), conversation_id="t-2", agent_id="support"
    )
    assert [r.body["model"] for r in llm.requests] == ["scripted", "grader", "scripted"]
    [graded] = [e for e in await memory.load() if e.id == first.recorded_ids[0]]
    assert graded.outcome == "success"
    assert second.recorded[0].query == "Sorted! And invoices?"


def test_the_agent_option_is_checked() -> None:
    with pytest.raises(ConfigurationError, match=r"Agent\.grade_followups must be True, False"):
        Agent(name="a", model="openai/x", grade_followups=3)  # type: ignore[arg-type]


async def test_run_agent_refuses_a_bad_conversation_id() -> None:
    agent = Agent(name="a", model="openai/x", episodic_memory=EpisodicMemory(InMemoryProvider()))
    with pytest.raises(ConfigurationError, match="conversation_id: no white space"):
        await run_agent(agent, ask(TASK), conversation_id="a b")


async def test_stream_agent_takes_the_conversation_too(llm: ScriptedLLM) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    agent = make_agent(llm, memory, grade_followups=True)
    llm.script(Reply.text(ANSWER))
    await run_agent(agent, ask(TASK), conversation_id="t-3")
    llm.script(Reply.text("Glad!"))
    stream = stream_agent(agent, ask(TASK, "solved, thanks"), conversation_id="t-3")
    kinds = [event.event async for event in stream]
    assert stream.result is not None
    assert stream.result.recorded == []
    assert EventType.EPISODE_RECORDED not in kinds
    [episode] = await memory.load()
    assert episode.outcome == "success"
