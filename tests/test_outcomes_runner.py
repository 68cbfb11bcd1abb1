"""Outcomes that carry information, on the runner's side (issue 14): infrastructure failures are
``abandoned`` (or skipped), never the agent's ``failure``; one ``run_id`` per run; the ids of
what a run recorded; distilled episodes; transcripts on disk.

End to end: litellm over real HTTP to the scripted server, episodes stored on every kind of
provider (the ``provider`` fixture) for the key cases. litellm is asyncio-only, so these run
on asyncio.
"""

from __future__ import annotations

import json
import os
import socket
import stat
from pathlib import Path
from typing import Any

import litellm
import pytest
from llm_server import Reply, ScriptedLLM

from deepcrew_episodic import (
    Agent,
    AgentResult,
    ConfigurationError,
    Episode,
    EpisodicHook,
    EpisodicMemory,
    LoopConfig,
    ToolError,
    Verdict,
    run_agent,
)
from deepcrew_episodic.providers import InMemoryProvider, MemoryProvider

pytestmark = pytest.mark.anyio

QUERY = "Rotate the billing API key"
ASK = [{"role": "user", "content": QUERY}]
SECRET = "AKIAIOSFODNN7EXAMPLE"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make_agent(llm: ScriptedLLM, memory: EpisodicMemory, **options: Any) -> Agent:
    params = {**llm.params, "max_retries": 0, **options.pop("extra_params", {})}
    if options.get("distill_model"):
        options.setdefault("distill_params", {**llm.params, "max_retries": 0})
    return Agent(
        name="billing",
        model="openai/scripted",
        extra_params=params,
        episodic_memory=memory,
        **options,
    )


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def record(outcome: str = "success", lesson: str = "revoke the old key last") -> Reply:
    return Reply.text(
        f"TASK: rotate the billing API key\nAPPROACH: created a second key, then revoked "
        f"the first\nOUTCOME: {outcome}\nLESSON: {lesson}"
    )


# --- infrastructure failures ----------------------------------------------------------------


INFRASTRUCTURE = [
    (429, litellm.RateLimitError),
    (401, litellm.AuthenticationError),
    (403, litellm.APIError),  # litellm maps an OpenAI-style provider's 403 to APIError
    (500, litellm.InternalServerError),
    (503, litellm.ServiceUnavailableError),
    (402, Exception),  # out of credits: whatever class litellm picks, the status says it
    (502, Exception),
    (504, Exception),
]


@pytest.mark.parametrize(("status", "error"), INFRASTRUCTURE)
async def test_a_provider_error_is_abandoned_not_failure(
    llm: ScriptedLLM, status: int, error: type[Exception]
) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    llm.script(Reply.error(status, f"provider says no ({status})"))
    with pytest.raises(error) as caught:
        await run_agent(make_agent(llm, memory), ASK)
    [episode] = await memory.load()
    assert episode.outcome == "abandoned"
    assert episode.response.startswith(f"Run abandoned: {type(caught.value).__name__}: ")
    assert f"provider says no ({status})" in episode.response
    assert "infrastructure" in episode.tags
    assert episode.run_id
    assert f"abandoned episode {episode.id} recorded" in caught.value.__notes__


async def test_an_outage_is_abandoned_and_left_out_of_recall_on_every_provider(
    llm: ScriptedLLM, provider: MemoryProvider
) -> None:
    memory = EpisodicMemory(provider, namespace="outage")
    agent = make_agent(
        llm, memory, extra_params={"api_base": f"http://127.0.0.1:{closed_port()}/v1"}
    )
    # litellm 1.110 reports a refused connection as an InternalServerError ("Connection
    # error."); an older one as APIConnectionError: either is the provider's, not the agent's
    with pytest.raises((litellm.APIConnectionError, litellm.InternalServerError)) as caught:
        await run_agent(agent, ASK)
    [episode] = await EpisodicMemory(provider, namespace="outage").load()
    assert (episode.outcome, episode.tags) == ("abandoned", ["infrastructure"])
    assert episode.response.startswith(f"Run abandoned: {type(caught.value).__name__}: ")
    assert await memory.recall(QUERY) == []  # an outage says nothing about the task
    assert [e.id for e in await memory.recall(QUERY, outcome="abandoned")] == [episode.id]


async def test_a_timeout_is_abandoned(llm: ScriptedLLM) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    llm.script(Reply.text("too late", delay=3))
    with pytest.raises(litellm.Timeout):
        await run_agent(make_agent(llm, memory, extra_params={"timeout": 0.3}), ASK)
    [episode] = await memory.load()
    assert episode.outcome == "abandoned"
    assert "Timeout" in episode.response


async def test_skip_records_nothing_and_still_raises(llm: ScriptedLLM) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    llm.script(Reply.error(429, "slow down"))
    agent = make_agent(llm, memory, infrastructure_failures="skip")
    with pytest.raises(litellm.RateLimitError) as caught:
        await run_agent(agent, ASK)
    assert await memory.load() == []
    assert any("not recorded" in note for note in caught.value.__notes__)
    assert memory.counters.record_failures == 0


async def test_skip_still_records_the_agents_own_failure(llm: ScriptedLLM) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    llm.script(Reply.error(400, "context too long"))
    agent = make_agent(llm, memory, infrastructure_failures="skip")
    with pytest.raises(litellm.BadRequestError):
        await run_agent(agent, ASK)
    [episode] = await memory.load()
    assert episode.outcome == "failure"


async def test_a_tool_that_hits_a_rate_limit_is_the_tools_failure(llm: ScriptedLLM) -> None:
    """Only the run's own model call decides: a tool's error, whatever it wraps, is a failure."""

    def summarise(text: str) -> str:
        raise litellm.RateLimitError("quota", llm_provider="openai", model="x")

    memory = EpisodicMemory(InMemoryProvider())
    llm.script(Reply.tool_call("summarise", {"text": "log"}))
    agent = make_agent(llm, memory, tools=[summarise], tool_errors="raise")
    with pytest.raises(ToolError):
        await run_agent(agent, ASK)
    [episode] = await memory.load()
    assert episode.outcome == "failure"
    assert "infrastructure" not in episode.tags


async def test_an_outage_in_a_loop_iteration_is_abandoned_and_keeps_the_run_id(
    llm: ScriptedLLM,
) -> None:
    memory = EpisodicMemory(InMemoryProvider())

    async def grade(query: str, result: AgentResult) -> Verdict:
        return Verdict(0.5, "more detail")

    llm.script(Reply.text("first"), Reply.error(503, "overloaded"))
    agent = make_agent(llm, memory, loop_config=LoopConfig(max_iterations=3, verifier=grade))
    with pytest.raises(litellm.ServiceUnavailableError):
        await run_agent(agent, ASK)
    first, second = await memory.load()
    assert (first.outcome, second.outcome) == ("partial", "abandoned")
    assert first.run_id == second.run_id != ""


def test_the_option_is_checked() -> None:
    with pytest.raises(ConfigurationError, match="infrastructure_failures"):
        Agent(name="a", model="openai/x", infrastructure_failures="ignore")  # type: ignore[arg-type]
    for bad in (
        {"distill_model": ""},
        {"distill_params": "x"},
        {"distill_timeout": 0},
        {"min_turns": 0},
        {"transcript_dir": 3},
    ):
        with pytest.raises(ConfigurationError):
            Agent(name="a", model="openai/x", **bad)  # type: ignore[arg-type]


# --- run ids and recorded ids -----------------------------------------------------------------


async def test_loop_iterations_share_a_run_id_and_runs_do_not(llm: ScriptedLLM) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    verdicts = [Verdict(0.2, "wrong"), Verdict(0.5, "closer"), Verdict(0.95)]

    async def grade(query: str, result: AgentResult) -> Verdict:
        return verdicts.pop(0)

    # target 0.9 / failure 0.4: the loop's thresholds decide, through the one score rule
    config = LoopConfig(max_iterations=3, verifier=grade, target_score=0.9, failure_score=0.4)
    llm.script(Reply.text("a"), Reply.text("b"), Reply.text("c"), Reply.text("plain"))
    looped = await run_agent(make_agent(llm, memory, loop_config=config), ASK)
    plain = await run_agent(make_agent(llm, memory), ASK)
    stored = await memory.load()
    assert [e.outcome for e in stored] == ["failure", "partial", "success", "unknown"]
    assert len({e.run_id for e in stored[:3]}) == 1
    assert stored[0].run_id == looped.run_id != plain.run_id == stored[3].run_id
    assert looped.recorded_ids == [e.id for e in stored[:3]]
    assert plain.recorded_ids == [stored[3].id]


async def test_an_unchecked_answer_stays_unknown_and_can_be_graded_later(
    llm: ScriptedLLM, provider: MemoryProvider
) -> None:
    memory = EpisodicMemory(provider, namespace="grades")
    llm.script(Reply.text("Done! The key is rotated and everything works."))
    result = await run_agent(make_agent(llm, memory), ASK)
    [episode] = await memory.load()
    assert episode.outcome == "unknown"  # the agent's own say-so is not a success
    await memory.grade(result.recorded_ids[-1], outcome="success", note="user: thanks")
    [graded] = await EpisodicMemory(provider, namespace="grades").load()
    assert graded.outcome == "success"


async def test_the_hook_says_what_it_stored_and_checks_its_arguments() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    hook = EpisodicHook(memory, agent_id="ops")
    done = await hook.after_run("restart the worker", "restarted", run_id="r-1")
    [stored] = await memory.load()
    assert done.id == stored.id
    assert stored.run_id == "r-1"
    with pytest.raises(ConfigurationError, match="score"):
        await hook.after_run("q", "a", score=7)
    with pytest.raises(ConfigurationError, match="score"):
        await hook.after_run("q", "a", outcome="success", score=1.5)
    with pytest.raises(ConfigurationError, match="outcome"):
        await hook.after_run("q", "a", outcome="great")  # type: ignore[arg-type]
    assert len(await memory.load()) == 1  # nothing stored for a bad call
    failed = await hook.failed("q", RuntimeError("boom"), run_id="r-2")
    assert failed.episode is not None
    assert (failed.episode.outcome, failed.episode.run_id) == ("failure", "r-2")


async def test_the_episodes_a_run_is_shown_count_a_use(llm: ScriptedLLM) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    await memory.record(
        Episode(query=QUERY, response="Create the new key first", outcome="success")
    )
    [before] = await memory.explain(QUERY)
    llm.script(Reply.text("done"))
    await run_agent(make_agent(llm, memory, min_turns=5), ASK)  # recalled, not recorded
    [after] = await memory.explain(QUERY)
    assert (before.uses, after.uses) == (0, 1)
    assert after.score > before.score


# --- distilled episodes -----------------------------------------------------------------------


async def test_a_distilled_run_on_every_provider(
    llm: ScriptedLLM, provider: MemoryProvider
) -> None:
    memory = EpisodicMemory(provider, namespace="distilled")
    llm.script(Reply.text("Created key 2 and revoked key 1."), record("success"))
    agent = make_agent(llm, memory, distill_model="openai/distiller")
    result = await run_agent(agent, ASK)
    [episode] = await EpisodicMemory(provider, namespace="distilled").load()
    assert episode.outcome == "claimed_success"  # the model said so; nobody checked
    assert episode.query == "rotate the billing API key"
    assert episode.approach == "created a second key, then revoked the first"
    assert episode.reflection == "revoke the old key last"
    assert episode.response == "Created key 2 and revoked key 1."
    assert episode.run_id == result.run_id
    assert result.recorded_ids == [episode.id]
    assert llm.requests[1].model == "distiller"
    assert QUERY in llm.requests[1].last_user_text


@pytest.mark.parametrize("said", ["abandoned", "gave_up", "gave up"])
async def test_a_task_the_agent_gave_up_on_is_a_lesson_the_next_run_recalls(
    llm: ScriptedLLM, provider: MemoryProvider, said: str
) -> None:
    memory = EpisodicMemory(provider, namespace="gave-up")
    lesson = "the billing API refuses a rotation while a deploy holds the key lock"
    llm.script(Reply.text("I could not rotate the key; giving up."), record(said, lesson))
    agent = make_agent(llm, memory, distill_model="openai/distiller")
    first = await run_agent(agent, ASK)
    [episode] = await memory.load()
    assert (episode.outcome, episode.tags) == ("failure", ["gave-up"])  # not an outage
    assert episode.reflection == lesson
    assert episode.run_id == first.run_id
    # The same task next time: the lesson is in the block the model reads, the episode in the
    # run's recalled ones.
    llm.script(Reply.text("Waited for the deploy, then rotated."), record("success"))
    second = await run_agent(agent, ASK)
    assert [e.id for e in second.recalled] == [episode.id]
    request = llm.requests[2]
    block = next(t for t in request.texts("system") if t.startswith("## Relevant past"))
    assert lesson in block
    assert "a model judged it failed (unverified)" in block  # the distiller said so
    assert (await memory.recall(QUERY, intent="what_failed"))[0].id == episode.id


async def test_an_outage_distilled_with_the_runners_verdict_stays_abandoned(
    llm: ScriptedLLM,
) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    llm.script(Reply.error(503, "upstream overloaded"))
    agent = make_agent(llm, memory, distill_model="openai/distiller")
    with pytest.raises(litellm.exceptions.ServiceUnavailableError):
        await run_agent(agent, ASK)
    [episode] = await memory.load()
    assert (episode.outcome, episode.tags) == ("abandoned", ["infrastructure"])
    assert await memory.recall(QUERY) == []


async def test_a_verifiers_outcome_beats_the_distillers(llm: ScriptedLLM) -> None:
    memory = EpisodicMemory(InMemoryProvider())

    async def grade(query: str, result: AgentResult) -> Verdict:
        return Verdict(0.1, "wrong key")

    llm.script(Reply.text("rotated"), record("success"))
    config = LoopConfig(max_iterations=1, verifier=grade)
    agent = make_agent(llm, memory, distill_model="openai/distiller", loop_config=config)
    await run_agent(agent, ASK)
    [episode] = await memory.load()
    assert (episode.outcome, episode.score) == ("failure", 0.1)
    assert episode.approach  # distilled all the same


async def test_a_none_lesson_is_stored_empty(llm: ScriptedLLM) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    llm.script(Reply.text("rotated"), record("partial", "NONE"))
    await run_agent(make_agent(llm, memory, distill_model="openai/distiller"), ASK)
    [episode] = await memory.load()
    assert episode.reflection is None
    assert episode.outcome == "partial"


@pytest.mark.parametrize(
    "distiller", [Reply.text("It went fine."), Reply.error(400, "distiller refused")]
)
async def test_a_failed_distillation_stores_the_plain_run_not_a_stub(
    llm: ScriptedLLM, distiller: Reply
) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    llm.script(Reply.text("Created key 2 and revoked key 1."), distiller)
    result = await run_agent(make_agent(llm, memory, distill_model="openai/distiller"), ASK)
    [episode] = await memory.load()
    assert (episode.query, episode.response) == (QUERY, "Created key 2 and revoked key 1.")
    assert (episode.approach, episode.reflection, episode.outcome) == ("", None, "unknown")
    assert memory.counters.reflection_failures == 1
    assert result.recorded_ids == [episode.id]
    assert result.record_errors == []


@pytest.mark.parametrize(
    ("messages", "options"),
    [
        ([{"role": "user", "content": "   "}], {}),  # no task
        (ASK, {"min_turns": 3}),  # one question, one answer
    ],
)
async def test_a_trivial_run_is_not_recorded(
    llm: ScriptedLLM, messages: list[dict[str, Any]], options: dict[str, Any]
) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    llm.script(Reply.text("hello"))
    result = await run_agent(
        make_agent(llm, memory, distill_model="openai/distiller", **options), messages
    )
    assert await memory.load() == []
    assert (result.recorded_ids, result.record_errors) == ([], [])
    assert len(llm.requests) == 1  # the distiller was not asked


async def test_a_run_with_tools_is_not_trivial_at_min_turns_three(llm: ScriptedLLM) -> None:
    def lookup(key_id: int) -> str:
        return "active"

    memory = EpisodicMemory(InMemoryProvider())
    llm.script(Reply.tool_call("lookup", {"key_id": 1}), Reply.text("Key 1 is active."))
    await run_agent(make_agent(llm, memory, tools=[lookup], min_turns=3), ASK)
    [episode] = await memory.load()
    assert episode.tools_used == ["lookup"]


# --- transcripts ------------------------------------------------------------------------------


async def test_the_transcript_is_written_private_and_referenced(
    llm: ScriptedLLM, tmp_path: Path
) -> None:
    def lookup(key_id: int) -> str:
        return "active"

    memory = EpisodicMemory(InMemoryProvider())
    llm.script(Reply.tool_call("lookup", {"key_id": 1}), Reply.text("Key 1 is active."))
    agent = make_agent(llm, memory, tools=[lookup], transcript_dir=tmp_path / "runs")
    result = await run_agent(agent, [{"role": "user", "content": f"{QUERY} ({SECRET})"}])
    [episode] = await memory.load()
    assert episode.transcript_ref is not None
    path = Path(episode.transcript_ref)
    assert path == tmp_path / "runs" / f"{result.run_id}.jsonl"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    raw = path.read_text(encoding="utf-8")
    assert SECRET not in raw  # redacted like the episode
    messages = [json.loads(line) for line in raw.splitlines()]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[-1]["content"] == "Key 1 is active."


async def test_each_iteration_and_a_failing_run_keep_their_transcripts(
    llm: ScriptedLLM, tmp_path: Path
) -> None:
    memory = EpisodicMemory(InMemoryProvider())

    async def grade(query: str, result: AgentResult) -> Verdict:
        return Verdict(0.5, "again")

    llm.script(Reply.text("first"), Reply.error(429, "slow down"))
    config = LoopConfig(max_iterations=2, verifier=grade)
    agent = make_agent(llm, memory, loop_config=config, transcript_dir=tmp_path)
    with pytest.raises(litellm.RateLimitError):
        await run_agent(agent, ASK)
    first, second = await memory.load()
    assert first.transcript_ref is not None
    assert second.transcript_ref is not None
    assert Path(first.transcript_ref).name == f"{first.run_id}-1.jsonl"
    assert Path(second.transcript_ref).name == f"{first.run_id}-2.jsonl"
    assert second.outcome == "abandoned"
    lines = Path(second.transcript_ref).read_text().splitlines()
    assert json.loads(lines[-1])["role"] == "user"  # the refinement request it never answered


async def test_a_transcript_that_cannot_be_written_costs_only_the_reference(
    llm: ScriptedLLM, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    memory = EpisodicMemory(InMemoryProvider())
    llm.script(Reply.text("rotated"))
    result = await run_agent(make_agent(llm, memory, transcript_dir=blocker), ASK)
    [episode] = await memory.load()
    assert episode.transcript_ref is None
    assert memory.counters.record_failures == 1
    assert len(result.record_errors) == 1
    assert "transcript" in result.record_errors[0]
