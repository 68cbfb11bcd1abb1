"""The refinement loop: one episode per iteration, graded by the verifier, feedback carried on."""

from __future__ import annotations

import json
from contextlib import aclosing
from typing import Any

import litellm
import pytest
from llm_server import Reply, ScriptedLLM

from deepcrew_episodic import (
    Agent,
    AgentResult,
    ConfigurationError,
    EpisodicMemory,
    EventType,
    LLMVerifier,
    LoopConfig,
    StreamEvent,
    StreamPolicy,
    Verdict,
    VerifierError,
    run_agent,
    stream_agent,
)
from deepcrew_episodic._verify import parse_verdict
from deepcrew_episodic.providers import InMemoryProvider

pytestmark = pytest.mark.anyio

QUERY = "Write the incident summary for the checkout outage"
ASK = [{"role": "user", "content": QUERY}]


class ScriptedVerifier:
    """Returns the given verdicts in order and remembers what it was asked."""

    def __init__(self, *verdicts: Verdict) -> None:
        self.verdicts = list(verdicts)
        self.asked: list[tuple[str, str]] = []

    async def __call__(self, query: str, result: AgentResult) -> Verdict:
        self.asked.append((query, result.text))
        return self.verdicts.pop(0)


def make_agent(llm: ScriptedLLM, config: LoopConfig, **options: Any) -> Agent:
    return Agent(
        name="writer",
        model="openai/scripted",
        extra_params={**llm.params, "max_retries": 0},
        loop_config=config,
        **options,
    )


async def test_each_iteration_records_one_graded_episode(llm: ScriptedLLM) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    verifier = ScriptedVerifier(
        Verdict(0.2, "It misses the root cause."),
        Verdict(0.5, "Add the timeline."),
        Verdict(0.9),
    )
    llm.script(
        Reply.text("draft one", prompt_tokens=10, completion_tokens=2),
        Reply.text("draft two", prompt_tokens=20, completion_tokens=2),
        Reply.text("draft three", prompt_tokens=30, completion_tokens=2),
    )
    config = LoopConfig(max_iterations=5, verifier=verifier)
    result = await run_agent(make_agent(llm, config, episodic_memory=memory), ASK)

    assert result.text == "draft three"
    assert result.loop_iterations == 3
    assert result.confidence == 0.9
    assert (result.input_tokens, result.output_tokens) == (60, 6)
    episodes = await memory.load()
    assert [(e.outcome, e.score) for e in episodes] == [
        ("failure", 0.2),
        ("partial", 0.5),
        ("success", 0.9),
    ]
    assert [e.response for e in episodes] == ["draft one", "draft two", "draft three"]
    assert {e.query for e in episodes} == {QUERY}
    assert [e.id for e in result.recorded] == [e.id for e in episodes]
    assert verifier.asked == [(QUERY, "draft one"), (QUERY, "draft two"), (QUERY, "draft three")]

    # the feedback of iteration n is in the prompt of iteration n + 1
    second, third = llm.requests[1], llm.requests[2]
    assert second.messages[-2] == {"role": "assistant", "content": "draft one"}
    assert "It misses the root cause." in second.last_user_text
    assert config.refine_prompt in second.last_user_text
    assert "Add the timeline." in third.last_user_text
    assert second.messages[0] == ASK[0]  # the original query stays


async def test_the_loop_stops_at_the_target_score(llm: ScriptedLLM) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    llm.script(Reply.text("good first time"))
    config = LoopConfig(max_iterations=4, verifier=ScriptedVerifier(Verdict(0.8)))
    result = await run_agent(make_agent(llm, config, episodic_memory=memory), ASK)
    assert result.loop_iterations == 1
    assert len(llm.requests) == 1
    [episode] = await memory.load()
    assert episode.outcome == "success"  # score == target_score counts


async def test_without_success_the_loop_runs_max_iterations(llm: ScriptedLLM) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    llm.script(Reply.text("a"), Reply.text("b"))
    verifier = ScriptedVerifier(Verdict(0.3), Verdict(0.79))
    config = LoopConfig(max_iterations=2, verifier=verifier)
    result = await run_agent(make_agent(llm, config, episodic_memory=memory), ASK)
    assert result.loop_iterations == 2
    assert result.text == "b"
    # 0.3 is not below failure_score=0.3: partial; 0.79 is below target_score=0.8: partial
    assert [e.outcome for e in await memory.load()] == ["partial", "partial"]


async def test_recall_happens_once_and_records_can_go_elsewhere(llm: ScriptedLLM) -> None:
    recall_from = EpisodicMemory(InMemoryProvider())
    await recall_from.record(
        {
            "query": "Incident summary for the search outage",
            "response": "Wrote it",
            "outcome": "success",
        }
    )
    record_into = EpisodicMemory(InMemoryProvider())
    llm.script(Reply.text("v1"), Reply.text("v2"))
    config = LoopConfig(
        max_iterations=2,
        verifier=ScriptedVerifier(Verdict(0.5), Verdict(0.95)),
        episodic_memory=record_into,
    )
    stream = stream_agent(make_agent(llm, config, episodic_memory=recall_from), ASK)
    events = [e async for e in stream]

    assert len([e for e in events if e.event == EventType.EPISODE_RECALLED]) == 1
    assert len([e for e in events if e.event == EventType.EPISODE_RECORDED]) == 2
    for request in llm.requests:  # the block stays for every iteration
        assert request.system_text.count("## Relevant past experience") == 1
        assert "search outage" in request.system_text
    assert len(await recall_from.load()) == 1
    assert [e.response for e in await record_into.load()] == ["v1", "v2"]
    assert stream.result is not None
    assert stream.result.episodes_recalled == 1


async def test_loop_events_are_verbose(llm: ScriptedLLM) -> None:
    llm.fallback = Reply.text("answer")
    config = LoopConfig(
        max_iterations=2, verifier=ScriptedVerifier(Verdict(0.5, "more"), Verdict(1.0))
    )
    events = [e async for e in stream_agent(make_agent(llm, config), ASK)]
    scored = [e.data for e in events if e.event == EventType.VERIFIER_SCORED]
    assert scored == [
        {"iteration": 0, "score": 0.5, "outcome": "partial", "feedback": "more"},
        {"iteration": 1, "score": 1.0, "outcome": "success", "feedback": ""},
    ]
    loops = [e.data for e in events if e.event == EventType.LOOP_ITERATION]
    assert loops[-1] == {"iteration": 1, "converged": True}
    assert events[-1].data["loop_iterations"] == 2

    config = LoopConfig(max_iterations=2, verifier=ScriptedVerifier(Verdict(0.5), Verdict(1.0)))
    standard = [
        e.event
        async for e in stream_agent(make_agent(llm, config), ASK, policy=StreamPolicy.standard())
    ]
    assert EventType.LOOP_ITERATION not in standard
    assert EventType.VERIFIER_SCORED not in standard


async def test_a_failing_iteration_records_failure_and_reraises(llm: ScriptedLLM) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    # a request the provider refuses for its content (a provider outage is not the agent's
    # failure: tests/test_outcomes_runner.py)
    llm.script(Reply.text("first try"), Reply.error(400, "prompt rejected"))
    config = LoopConfig(max_iterations=3, verifier=ScriptedVerifier(Verdict(0.4, "again")))
    with pytest.raises(litellm.BadRequestError, match="prompt rejected") as caught:
        await run_agent(make_agent(llm, config, episodic_memory=memory), ASK)
    first, second = await memory.load()
    assert (first.outcome, first.score) == ("partial", 0.4)
    assert second.outcome == "failure"
    assert "prompt rejected" in second.response
    assert second.query == QUERY
    assert f"failure episode {second.id} recorded" in caught.value.__notes__


async def test_a_verifier_that_raises_records_the_answer_ungraded(llm: ScriptedLLM) -> None:
    memory = EpisodicMemory(InMemoryProvider())

    async def broken(query: str, result: AgentResult) -> Verdict:
        raise KeyError("rubric")

    llm.script(Reply.text("answer"))
    config = LoopConfig(verifier=broken)
    with pytest.raises(VerifierError, match="KeyError") as caught:
        await run_agent(make_agent(llm, config, episodic_memory=memory), ASK)
    assert isinstance(caught.value.__cause__, KeyError)
    [episode] = await memory.load()
    # the agent answered; nobody graded it: not the agent's failure
    assert (episode.outcome, episode.score) == ("unknown", None)
    assert episode.tags == ["unverified"]
    assert episode.response.startswith("answer\nNot graded: the verifier failed with")
    assert "KeyError" in episode.response
    assert f"unverified episode {episode.id} recorded" in caught.value.__notes__


async def test_a_verifier_outage_mid_loop_keeps_the_graded_iterations(llm: ScriptedLLM) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    llm.script(
        Reply.text("draft one"),
        Reply.json({"score": 0.5, "issues": ["no timeline"]}, when=is_judge),
        Reply.text("draft two"),
        Reply.error(503, "judge overloaded", when=is_judge),
    )
    verifier = LLMVerifier("openai/judge", params={**llm.params, "max_retries": 0})
    stream = stream_agent(
        make_agent(llm, LoopConfig(verifier=verifier), episodic_memory=memory), ASK
    )
    events: list[StreamEvent] = []

    async def consume() -> None:
        async for event in stream:
            events.append(event)

    with pytest.raises(VerifierError, match="judge overloaded"):
        await consume()
    first, second = await memory.load()
    assert (first.outcome, first.score, first.response) == ("partial", 0.5, "draft one")
    assert (second.outcome, second.score) == ("unknown", None)
    assert second.response.startswith("draft two\n")
    recorded = [e.data for e in events if e.event == EventType.EPISODE_RECORDED]
    assert recorded == [
        {"outcome": "partial", "score": 0.5, "id": first.id},
        {"outcome": "unknown", "score": None, "id": second.id},
    ]
    scored = [e.data["iteration"] for e in events if e.event == EventType.VERIFIER_SCORED]
    assert scored == [0]  # the ungraded iteration has no score to report
    assert events[-1].event == EventType.ERROR
    assert events[-1].data["error_type"] == "VerifierError"


async def test_a_consumer_stopping_at_verifier_scored_keeps_the_episode(
    llm: ScriptedLLM,
) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    llm.fallback = Reply.text("draft")
    config = LoopConfig(max_iterations=3, verifier=ScriptedVerifier(Verdict(0.5, "more")))
    stream = stream_agent(make_agent(llm, config, episodic_memory=memory), ASK)
    events = aiter(stream)
    async with aclosing(events):
        async for event in events:
            if event.event == EventType.VERIFIER_SCORED:
                break
    [episode] = await memory.load()
    assert (episode.outcome, episode.score, episode.response) == ("partial", 0.5, "draft")
    assert len(llm.requests) == 1  # the loop went no further


# --- the LLM verifier ---------------------------------------------------------------------


def is_judge(request: Any) -> bool:
    return bool(request.model == "judge")


@pytest.mark.parametrize("redact", [True, False])
async def test_the_llm_verifier_sends_no_secret_to_its_model(
    llm: ScriptedLLM, redact: bool
) -> None:
    key = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z" * 2
    memory = EpisodicMemory(InMemoryProvider())
    llm.script(
        Reply.text(f"Rotated it; the new key is {key}."),
        Reply.json({"score": 0.9, "issues": [], "suggestion": ""}, when=is_judge),
    )
    verifier = LLMVerifier("openai/judge", params={**llm.params, "max_retries": 0}, redact=redact)
    agent = make_agent(llm, LoopConfig(verifier=verifier), episodic_memory=memory)
    await run_agent(agent, [{"role": "user", "content": f"{QUERY}. The old key was {key}."}])
    [judge] = [r for r in llm.requests if is_judge(r)]
    assert (key in json.dumps(judge.messages)) is not redact
    if redact:
        assert "[REDACTED:openai-key]" in judge.last_user_text
        assert "Rotated it; the new key is" in judge.last_user_text


async def test_llm_verifier_grades_through_the_model(llm: ScriptedLLM) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    llm.script(
        Reply.text("Checkout was down."),
        Reply.json(
            {"score": 0.4, "issues": ["no timeline", "no root cause"], "suggestion": "Add both."},
            when=is_judge,
        ),
        Reply.text("Checkout was down 14:02-14:40 because of an expired certificate."),
        Reply.json({"score": "0.92", "issues": [], "suggestion": ""}, when=is_judge),
    )
    verifier = LLMVerifier(
        "openai/judge", rubric="Has a timeline.", params={**llm.params, "max_retries": 0}
    )
    result = await run_agent(
        make_agent(llm, LoopConfig(verifier=verifier), episodic_memory=memory), ASK
    )
    assert result.loop_iterations == 2
    assert [(e.outcome, e.score) for e in await memory.load()] == [
        ("partial", 0.4),
        ("success", 0.92),
    ]
    judge_request = llm.requests[1]
    assert judge_request.model == "judge"
    assert not judge_request.stream
    assert judge_request.body["response_format"] == {"type": "json_object"}
    assert "Has a timeline." in judge_request.system_text
    assert QUERY in judge_request.last_user_text
    assert "Checkout was down." in judge_request.last_user_text
    refine = llm.requests[2].last_user_text
    assert "- no timeline" in refine
    assert "- no root cause" in refine
    assert "Suggestion: Add both." in refine


@pytest.mark.parametrize(
    "reply",
    [Reply.error(500, "judge down"), Reply.text("Looks fine to me!"), Reply.json({"score": 7})],
)
async def test_llm_verifier_without_a_usable_score_raises(llm: ScriptedLLM, reply: Reply) -> None:
    llm.script(reply)
    verifier = LLMVerifier("openai/judge", params={**llm.params, "max_retries": 0})
    with pytest.raises(VerifierError):
        await verifier(QUERY, AgentResult(agent_id="a", text="answer"))


async def test_llm_verifier_timeout_is_bounded(llm: ScriptedLLM) -> None:
    llm.script(Reply.json({"score": 1.0}, delay=30))
    verifier = LLMVerifier("openai/judge", timeout=0.5, params={**llm.params, "max_retries": 0})
    with pytest.raises(VerifierError, match="failed"):
        await verifier(QUERY, AgentResult(agent_id="a", text="answer"))


def test_parse_verdict_reads_the_json_a_model_gives() -> None:
    assert parse_verdict('{"score": 0.7}') == Verdict(0.7)
    fenced = '```json\n{"score": 1, "issues": ["typo"], "suggestion": "fix it"}\n```'
    assert parse_verdict(fenced) == Verdict(1.0, "Issues:\n- typo\nSuggestion: fix it")
    assert parse_verdict('Here you go: {"score": "0.25", "issues": "vague"} Thanks.') == Verdict(
        0.25, "Issues:\n- vague"
    )
    past_a_float = '{"score": 1' + "0" * 400 + "}"  # JSON takes it; a float cannot hold it
    for bad in [
        '{"issues": []}',
        "[0.5]",
        '{"score": true}',
        '{"score": -0.1}',
        "nope",
        past_a_float,
        '{"score": NaN}',
        '{"score": -Infinity}',
        '{"score": 1e999}',
    ]:
        with pytest.raises(VerifierError):
            parse_verdict(bad)


def test_configuration_errors() -> None:
    async def verifier(query: str, result: AgentResult) -> Verdict:
        return Verdict(1.0)

    with pytest.raises(ConfigurationError, match="verifier"):
        LoopConfig()
    with pytest.raises(ConfigurationError, match="max_iterations"):
        LoopConfig(max_iterations=0, verifier=verifier)
    with pytest.raises(ConfigurationError, match="failure_score"):
        LoopConfig(verifier=verifier, target_score=0.5, failure_score=0.6)
    with pytest.raises(ConfigurationError, match="target_score"):
        LoopConfig(verifier=verifier, target_score=1.5)
    with pytest.raises(ConfigurationError, match="score"):
        Verdict(1.2)
    with pytest.raises(ConfigurationError, match="score"):
        Verdict(float("nan"))


async def test_a_verifier_returning_something_else_is_an_error(llm: ScriptedLLM) -> None:
    async def sloppy(query: str, result: AgentResult) -> Any:
        return 0.9

    llm.script(Reply.text("answer"))
    with pytest.raises(VerifierError, match="not a Verdict"):
        await run_agent(make_agent(llm, LoopConfig(verifier=sloppy)), ASK)
