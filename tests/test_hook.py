"""EpisodicHook on its own, stream events and policies, and the lazy import promise."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Sequence

import anyio
import anyio.lowlevel
import pytest

from deepcrew_episodic import (
    ConfigurationError,
    Episode,
    EpisodicHook,
    EpisodicMemory,
    EventType,
    StreamEvent,
    StreamPolicy,
)
from deepcrew_episodic._render import fit_block, render_block
from deepcrew_episodic.providers import InMemoryProvider

pytestmark = pytest.mark.anyio

# deepcrew-ai 0.6.1's EventType, name -> value: consumers written for it must read ours.
DEEPCREW_EVENTS = {
    "AGENT_START": "agent_start",
    "TEXT_DELTA": "text_delta",
    "THINKING_DELTA": "thinking_delta",
    "TOOL_CALL": "tool_call",
    "TOOL_RESULT": "tool_result",
    "TOOL_DENIED": "tool_denied",
    "AGENT_DONE": "agent_done",
    "STEP_START": "step_start",
    "STEP_DONE": "step_done",
    "ERROR": "error",
    "DONE": "done",
    "RETRY_ATTEMPT": "retry_attempt",
    "FALLBACK_TRIGGERED": "fallback_triggered",
    "MEMORY_STORE": "memory_store",
    "MEMORY_RETRIEVE": "memory_retrieve",
    "LOOP_ITERATION": "loop_iteration",
    "SPAWN_AGENT": "spawn_agent",
    "APEX_START": "apex_start",
    "APEX_DONE": "apex_done",
    "VERIFIER_SCORED": "verifier_scored",
    "PLAYBOOK_UPDATED": "playbook_updated",
    "BRANCH_SELECTED": "branch_selected",
    "SKILL_EXTRACTED": "skill_extracted",
    "EPISODE_RECALLED": "episode_recalled",
    "EPISODE_RECORDED": "episode_recorded",
}


async def memory_with_history() -> tuple[EpisodicMemory, list[Episode]]:
    memory = EpisodicMemory(InMemoryProvider())
    stored = [
        await memory.record(
            Episode(
                query=f"Rotate the API key of service {n}", response=f"done {n}", outcome="success"
            )
        )
        for n in range(3)
    ]
    return memory, stored


async def test_before_run_inserts_the_block_after_the_system_messages() -> None:
    memory, stored = await memory_with_history()
    events: list[StreamEvent] = []

    async def on_event(event: StreamEvent) -> None:  # async callbacks are awaited
        await anyio.lowlevel.checkpoint()
        events.append(event)

    hook = EpisodicHook(memory, agent_id="ops", on_event=on_event, top_k=2)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "earlier question"},
        {"role": "assistant", "content": "earlier answer"},
        {"role": "user", "content": [{"type": "text", "text": "How do I rotate an API key?"}]},
    ]
    recalled = await hook.before_run(messages)

    assert recalled.query == "How do I rotate an API key?"
    assert recalled.count == 2
    assert {e.id for e in recalled.episodes} <= {e.id for e in stored}
    assert recalled.messages[:2] == messages[:2]
    assert recalled.messages[2] == {"role": "system", "content": recalled.block}
    assert recalled.block.startswith("## Relevant past experience")
    assert recalled.messages[3:] == messages[2:]
    assert messages[2]["role"] == "user"  # the input list is not modified
    [event] = events
    assert event.event == EventType.EPISODE_RECALLED
    assert event.agent_id == "ops"
    assert event.data["count"] == 2
    assert event.data["ids"] == [e.id for e in recalled.episodes]


async def test_nothing_relevant_means_messages_unchanged_and_no_event() -> None:
    memory, _ = await memory_with_history()
    events: list[StreamEvent] = []
    hook = EpisodicHook(memory, on_event=events.append)
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    recalled = await hook.before_run(messages)
    assert recalled.messages == messages
    assert recalled.count == 0
    assert events == []
    assert (await hook.before_run([])).messages == []


async def test_the_block_budget_reports_only_the_episodes_shown() -> None:
    memory, _ = await memory_with_history()
    events: list[StreamEvent] = []
    one_item = len(memory.render((await memory.recall("rotate API key"))[:1]))
    hook = EpisodicHook(memory, on_event=events.append, max_block_chars=one_item + 5)
    recalled = await hook.before_run([{"role": "user", "content": "rotate API key"}])
    assert recalled.count == 1
    assert len(recalled.block) <= one_item + 5
    assert events[0].data["count"] == 1


async def test_the_reported_episodes_are_those_the_renderer_kept() -> None:
    memory, _ = await memory_with_history()
    recalled_all = await memory.recall("rotate API key")
    assert len(recalled_all) == 3
    full = len(memory.render(recalled_all))
    # every budget from "nothing fits" to "all fit", including each item boundary
    for budget in range(0, full + 2):
        events: list[StreamEvent] = []
        hook = EpisodicHook(memory, on_event=events.append, max_block_chars=budget)
        recalled = await hook.before_run([{"role": "user", "content": "rotate API key"}])
        block, kept = fit_block(recalled_all, max_chars=budget)
        assert recalled.block == block == memory.render(recalled_all, max_chars=budget)
        assert [e.id for e in recalled.episodes] == [e.id for e in kept]
        assert events == ([] if not kept else events[:1])
        if kept:
            assert events[0].data["ids"] == [e.id for e in kept]
            for episode in kept:  # each reported episode is in the block, in rank order
                assert f'"{episode.query}"' in block


def test_fit_block_reports_the_prefix_it_kept() -> None:
    episodes = [Episode(query=f"question {n}", response="answer", id=f"e{n}") for n in range(3)]
    block, kept = fit_block(episodes)
    assert block == render_block(episodes)
    assert kept == episodes
    one = len(render_block(episodes[:1]))
    assert fit_block(episodes, max_chars=one) == (render_block(episodes[:1]), episodes[:1])
    assert fit_block(episodes, max_chars=one - 1) == ("", [])
    assert fit_block([]) == ("", [])


class HangingProvider(InMemoryProvider):
    async def retrieve_many(self, keys: Sequence[str]) -> list[str | None]:
        await anyio.sleep(30)
        return await super().retrieve_many(keys)


async def test_a_hanging_backend_is_a_bounded_recall_failure() -> None:
    memory = EpisodicMemory(HangingProvider())
    events: list[StreamEvent] = []
    hook = EpisodicHook(memory, on_event=events.append, recall_timeout=0.2)
    started = time.monotonic()
    messages = [{"role": "user", "content": "rotate the key"}]
    recalled = await hook.before_run(messages)
    assert time.monotonic() - started < 5
    assert recalled.messages == messages
    assert recalled.error is not None
    assert "TimeoutError" in recalled.error
    assert memory.counters.recall_failures == 1
    assert [e.event for e in events] == [EventType.EPISODE_RECALL_FAILED]


class StuckWrites(InMemoryProvider):
    async def increment_and_write(self, key: str, then: object, **options: object) -> int:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


async def test_a_hanging_store_is_a_bounded_record_failure() -> None:
    memory = EpisodicMemory(StuckWrites())
    events: list[StreamEvent] = []
    hook = EpisodicHook(memory, on_event=events.append, record_timeout=0.2)
    with anyio.fail_after(5):
        recorded = await hook.after_run("rotate the key", "made a second key")
    assert recorded.id is None
    assert recorded.error == "TimeoutError: the record took longer than 0.2 s"
    assert memory.counters.record_failures == 1
    assert [e.event for e in events] == [EventType.EPISODE_RECORD_FAILED]
    assert await memory.load() == []


@pytest.mark.parametrize(
    ("score", "outcome"), [(0.7, "success"), (0.69, "partial"), (None, "unknown")]
)
async def test_after_run_outcome_from_score(score: float | None, outcome: str) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    events: list[StreamEvent] = []
    hook = EpisodicHook(memory, agent_id="ops", on_event=events.append, tags=["ops"])
    recorded = await hook.after_run(
        "q", "a", score=score, tools_used=["b", "a", "b"], tags=["x", "ops"]
    )
    assert recorded.error is None
    assert recorded.episode is not None
    assert recorded.episode.outcome == outcome
    assert recorded.episode.tools_used == ["a", "b"]
    assert recorded.episode.tags == ["ops", "x"]
    assert recorded.episode.agent_id == "ops"
    assert events[0].data == {"outcome": outcome, "score": score, "id": recorded.episode.id}


async def test_failed_names_the_error_and_keeps_the_partial_answer() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    hook = EpisodicHook(memory)
    recorded = await hook.failed("q", ValueError("bad input"), partial_response="half an answer")
    assert recorded.episode is not None
    assert recorded.episode.outcome == "failure"
    assert recorded.episode.response == (
        "Run failed with ValueError: bad input\nPartial answer: half an answer"
    )


async def test_failed_takes_a_frameworks_word_on_infrastructure() -> None:
    # A framework's own outage error (not litellm's) is abandoned when the caller says so, and
    # the caller's "no" wins over the litellm rule: only the framework knows its classes.
    memory = EpisodicMemory(InMemoryProvider())
    hook = EpisodicHook(memory)
    outage = await hook.failed("q", RuntimeError("503 from the provider"), infrastructure=True)
    assert outage.episode is not None
    assert outage.episode.outcome == "abandoned"
    assert outage.episode.tags == ["infrastructure"]
    assert outage.episode.response == "Run abandoned: RuntimeError: 503 from the provider"
    crash = await hook.failed("q", RuntimeError("a bug"), infrastructure=False)
    assert crash.episode is not None
    assert crash.episode.outcome == "failure"
    assert crash.episode.tags == []


def test_hook_settings_are_checked() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    with pytest.raises(ConfigurationError, match="top_k"):
        EpisodicHook(memory, top_k=0)
    with pytest.raises(ConfigurationError, match="recall_timeout"):
        EpisodicHook(memory, recall_timeout=0)
    with pytest.raises(ConfigurationError, match="record_timeout"):
        EpisodicHook(memory, record_timeout=-1)
    for bad in (-1, 1.5, True, "100"):
        with pytest.raises(ConfigurationError, match="max_block_chars"):
            EpisodicHook(memory, max_block_chars=bad)  # type: ignore[arg-type]


async def test_unverified_keeps_the_answer_and_names_the_error() -> None:
    memory = EpisodicMemory(InMemoryProvider())
    events: list[StreamEvent] = []
    hook = EpisodicHook(memory, on_event=events.append, tags=["ops"])
    recorded = await hook.unverified(
        "q", "the answer ", TimeoutError("judge timed out"), tools_used=["kubectl"]
    )
    assert recorded.episode is not None
    episode = recorded.episode
    assert (episode.outcome, episode.score) == ("unknown", None)
    assert episode.response == (
        "the answer\nNot graded: the verifier failed with TimeoutError: judge timed out"
    )
    assert episode.tags == ["ops", "unverified"]
    assert episode.tools_used == ["kubectl"]
    assert events[0].data == {"outcome": "unknown", "score": None, "id": episode.id}


# --- events ---------------------------------------------------------------------------------


def test_event_types_keep_every_deepcrew_value() -> None:
    for name, value in DEEPCREW_EVENTS.items():
        assert EventType[name].value == value
    new = {e.name for e in EventType} - set(DEEPCREW_EVENTS)
    assert new == {"EPISODE_RECALL_FAILED", "EPISODE_RECORD_FAILED"}


def test_stream_event_encodings() -> None:
    event = StreamEvent(EventType.EPISODE_RECALLED, {"count": 1, "ids": ["a1"]}, "ops")
    assert event.to_dict() == {
        "event": "episode_recalled",
        "agent_id": "ops",
        "count": 1,
        "ids": ["a1"],
    }
    head, data, blank, end = event.to_sse().split("\n")
    assert head == "event: episode_recalled"
    assert json.loads(data.removeprefix("data: ")) == {"agent_id": "ops", "count": 1, "ids": ["a1"]}
    assert (blank, end) == ("", "")


def test_policies() -> None:
    episode_events = {e for e in EventType if e.value.startswith("episode_")}
    assert len(episode_events) == 4
    for event in EventType:
        assert StreamPolicy.verbose().allows(event)
    for policy in (StreamPolicy.chat(), StreamPolicy.standard()):
        assert not any(policy.allows(e) for e in episode_events)
        assert policy.allows(EventType.TEXT_DELTA)
        assert policy.allows(EventType.DONE)
        assert policy.allows(EventType.ERROR)
    assert not StreamPolicy.chat().allows(EventType.TOOL_CALL)
    assert StreamPolicy.standard().allows(EventType.TOOL_CALL)
    custom = StreamPolicy(exclude=frozenset({EventType.TEXT_DELTA}))
    assert not custom.allows(EventType.TEXT_DELTA)
    assert custom.allows(EventType.EPISODE_RECORDED)


# --- import cost ------------------------------------------------------------------------------


def test_importing_the_package_and_the_runner_never_imports_litellm() -> None:
    code = """
import sys
import deepcrew_episodic
assert "litellm" not in sys.modules, "import deepcrew_episodic imported litellm"
from deepcrew_episodic import (Agent, AgentResult, EpisodicHook, EventType, LLMVerifier,
    LoopConfig, StreamEvent, StreamPolicy, Verdict, run_agent, stream_agent)
import deepcrew_episodic._runner, deepcrew_episodic._refinement, deepcrew_episodic._hook
assert "litellm" not in sys.modules, "the runner modules imported litellm"
def ping(host: str) -> str:
    return host
agent = Agent(name="a", model="openai/x", tools=[ping])
LoopConfig(verifier=LLMVerifier("openai/judge"))
assert "litellm" not in sys.modules, "building an agent imported litellm"
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
