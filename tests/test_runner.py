"""Agent, run_agent and stream_agent against the scripted OpenAI-compatible server.

Nothing is patched: litellm goes over real HTTP to ``tests/llm_server.py``.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from contextlib import aclosing
from typing import Annotated, Any, Literal

import anyio
import litellm
import pytest
from llm_server import Reply, ScriptedLLM
from pydantic import BaseModel, Field

from deepcrew_episodic import (
    Agent,
    ConfigurationError,
    Episode,
    EpisodicMemory,
    EventType,
    MaxTurnsError,
    StorageError,
    StreamEvent,
    StreamPolicy,
    ToolError,
    run_agent,
    stream_agent,
)
from deepcrew_episodic.providers import InMemoryProvider

pytestmark = pytest.mark.anyio

ASK = [{"role": "user", "content": "How do I rotate the billing API key?"}]


def make_agent(llm: ScriptedLLM, **options: Any) -> Agent:
    params = {**llm.params, "max_retries": 0, **options.pop("extra_params", {})}
    return Agent(name="assistant", model="openai/scripted", extra_params=params, **options)


class FlakyProvider(InMemoryProvider):
    """A real provider whose reads or writes fail like an unreachable backend."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_reads = False
        self.fail_writes = False

    def _check(self, failing: bool) -> None:
        if failing:
            raise StorageError("backend unreachable (scripted)")

    async def retrieve(self, key: str) -> str | None:
        self._check(self.fail_reads)
        return await super().retrieve(key)

    async def retrieve_many(self, keys: Sequence[str]) -> list[str | None]:
        self._check(self.fail_reads)
        return await super().retrieve_many(keys)

    async def store(self, key: str, value: str) -> None:
        self._check(self.fail_writes)
        await super().store(key, value)

    async def write(self, items: Mapping[str, str], delete: Collection[str] = ()) -> None:
        self._check(self.fail_writes)
        await super().write(items, delete)

    async def write_if(
        self,
        expect: Mapping[str, str | None],
        items: Mapping[str, str],
        delete: Collection[str] = (),
    ) -> bool:
        self._check(self.fail_writes)
        return await super().write_if(expect, items, delete)

    async def increment_and_write(self, key: str, then: Any, **options: Any) -> int:
        self._check(self.fail_writes)
        return await super().increment_and_write(key, then, **options)

    async def increment(self, key: str, **options: Any) -> int:
        # forwards whatever keywords the provider API takes (initial=, repair=, ...)
        self._check(self.fail_writes)
        return await super().increment(key, **options)


class HangingProvider(FlakyProvider):
    """A real provider whose writes, once ``hang_writes`` is set, never answer (a store that
    hangs: a lost connection with no timeout of its own)."""

    def __init__(self) -> None:
        super().__init__()
        self.hang_writes = False

    async def _hang(self) -> None:
        if self.hang_writes:
            await anyio.sleep_forever()

    async def store(self, key: str, value: str) -> None:
        await self._hang()
        await super().store(key, value)

    async def write(self, items: Mapping[str, str], delete: Collection[str] = ()) -> None:
        await self._hang()
        await super().write(items, delete)

    async def write_if(
        self,
        expect: Mapping[str, str | None],
        items: Mapping[str, str],
        delete: Collection[str] = (),
    ) -> bool:
        await self._hang()
        return await super().write_if(expect, items, delete)

    async def increment_and_write(self, key: str, then: Any, **options: Any) -> int:
        await self._hang()
        return await super().increment_and_write(key, then, **options)

    async def increment(self, key: str, **options: Any) -> int:
        await self._hang()
        return await super().increment(key, **options)


async def collect(agent: Agent, policy: StreamPolicy | None = None) -> list[StreamEvent]:
    return [event async for event in stream_agent(agent, ASK, policy=policy)]


def of(events: list[StreamEvent], kind: EventType) -> list[StreamEvent]:
    return [e for e in events if e.event == kind]


# --- the model/tool loop ------------------------------------------------------------------


async def test_streaming_text_and_the_result(llm: ScriptedLLM) -> None:
    llm.script(
        Reply.text(
            "Create a second key, then revoke the first.", prompt_tokens=20, completion_tokens=9
        )
    )
    agent = make_agent(llm, system_prompt="You are a security engineer.")
    stream = stream_agent(agent, ASK)
    events = [e async for e in stream]
    deltas = [e.data["chunk"] for e in of(events, EventType.TEXT_DELTA)]
    assert len(deltas) > 1
    assert "".join(deltas) == "Create a second key, then revoke the first."
    assert next(e.event for e in events) == EventType.AGENT_START
    assert events[-1].event == EventType.DONE
    assert events[-1].data["text"] == "Create a second key, then revoke the first."
    result = stream.result
    assert result is not None
    assert result.text == "Create a second key, then revoke the first."
    assert (result.input_tokens, result.output_tokens, result.total_tokens) == (20, 9, 29)
    assert result.agent_id == "assistant"
    assert result.loop_iterations == 0
    [request] = llm.requests
    assert request.stream
    assert request.body["stream_options"] == {"include_usage": True}
    assert request.messages[0] == {"role": "system", "content": "You are a security engineer."}
    assert request.messages[1:] == ASK


async def test_sync_and_async_tools_run_and_their_results_go_back(llm: ScriptedLLM) -> None:
    seen: list[tuple[str, Any]] = []

    def lookup_key(service: str, include_revoked: bool = False) -> dict[str, Any]:
        """Find the current API key of a service.

        Args:
            service: The service name.
            include_revoked: Also list revoked keys.
        """
        seen.append(("lookup_key", (service, include_revoked)))
        return {"service": service, "key_id": "k-17"}

    async def rotate(key_id: str, overlap_minutes: int) -> str:
        """Rotate a key, keeping the old one alive for a while."""
        seen.append(("rotate", (key_id, overlap_minutes)))
        return f"rotated {key_id} with {overlap_minutes} min overlap"

    llm.script(
        Reply.tool_call(
            "lookup_key", {"service": "billing"}, prompt_tokens=10, completion_tokens=5
        ),
        Reply.tool_call(
            "rotate",
            {"key_id": "k-17", "overlap_minutes": 30},
            prompt_tokens=30,
            completion_tokens=6,
        ),
        Reply.text(
            "Rotated k-17; the old key lives 30 more minutes.",
            prompt_tokens=50,
            completion_tokens=11,
        ),
    )
    result = await run_agent(make_agent(llm, tools=[lookup_key, rotate]), ASK)

    assert seen == [("lookup_key", ("billing", False)), ("rotate", ("k-17", 30))]
    assert result.text == "Rotated k-17; the old key lives 30 more minutes."
    assert [c["tool"] for c in result.tool_calls] == ["lookup_key", "rotate"]
    assert result.tool_calls[1]["args"] == {"key_id": "k-17", "overlap_minutes": 30}
    assert result.tools_used == ["lookup_key", "rotate"]
    assert (result.input_tokens, result.output_tokens) == (90, 22)

    first, second, third = llm.requests
    tools = {t["function"]["name"]: t["function"] for t in first.tools}
    assert tools["lookup_key"]["description"] == "Find the current API key of a service."
    assert tools["lookup_key"]["parameters"] == {
        "type": "object",
        "properties": {
            "service": {"type": "string", "description": "The service name."},
            "include_revoked": {"type": "boolean", "description": "Also list revoked keys."},
        },
        "required": ["service"],
    }
    assert first.body["tool_choice"] == "auto"
    # turn 2 carries the assistant's tool call and the tool's result
    assistant, tool_msg = second.messages[-2:]
    assert assistant["tool_calls"][0]["function"]["name"] == "lookup_key"
    assert tool_msg["role"] == "tool"
    assert tool_msg["tool_call_id"] == assistant["tool_calls"][0]["id"]
    assert json.loads(tool_msg["content"]) == {"service": "billing", "key_id": "k-17"}
    assert third.messages[-1]["content"] == "rotated k-17 with 30 min overlap"


async def test_parallel_tool_calls_in_one_turn(llm: ScriptedLLM) -> None:
    def double(n: int) -> int:
        return 2 * n

    llm.script(
        Reply.tool_calls([("double", {"n": 2}), ("double", {"n": 5})]),
        Reply.text("4 and 10"),
    )
    stream = stream_agent(make_agent(llm, tools=[double]), ASK, policy=StreamPolicy.standard())
    events = [e async for e in stream]
    assert [e.data["result"] for e in of(events, EventType.TOOL_RESULT)] == ["4", "10"]
    assert [e.data["args"] for e in of(events, EventType.TOOL_CALL)] == [{"n": 2}, {"n": 5}]
    tool_msgs = [m for m in llm.requests[1].messages if m["role"] == "tool"]
    assert [m["content"] for m in tool_msgs] == ["4", "10"]


async def test_extra_params_temperature_and_max_tokens_reach_the_model(llm: ScriptedLLM) -> None:
    llm.script(Reply.text("ok"))
    agent = make_agent(
        llm,
        temperature=0.2,
        max_tokens=64,
        extra_params={"top_p": 0.5, "seed": 7, "extra_headers": {"X-Trace-Id": "trace-42"}},
    )
    await run_agent(agent, ASK)
    body = llm.requests[0].body
    assert body["temperature"] == 0.2
    assert body["max_tokens"] == 64
    assert body["top_p"] == 0.5
    assert body["seed"] == 7
    assert llm.requests[0].headers["x-trace-id"] == "trace-42"
    assert "tools" not in body


async def test_max_turns_raises_and_records_a_failure(llm: ScriptedLLM) -> None:
    def ping() -> str:
        return "pong"

    memory = EpisodicMemory(InMemoryProvider())
    llm.fallback = Reply.tool_call("ping", {})
    agent = make_agent(llm, tools=[ping], max_turns=3, episodic_memory=memory)
    with pytest.raises(MaxTurnsError, match="max_turns=3") as caught:
        await run_agent(agent, ASK)
    assert len(llm.requests) == 3
    [episode] = await memory.load()
    assert episode.outcome == "failure"
    assert "MaxTurnsError" in episode.response
    assert episode.query == ASK[0]["content"]
    assert episode.tools_used == ["ping"]
    assert any(episode.id in note for note in caught.value.__notes__)


# A request the provider refused for what it asked is the run's failure; a provider that could
# not be used (5xx, 429, 401, unreachable) is not: tests/test_outcomes_runner.py.
@pytest.mark.parametrize(
    ("status", "error"), [(400, litellm.BadRequestError), (404, litellm.NotFoundError)]
)
async def test_a_model_error_records_a_failure_then_reraises(
    llm: ScriptedLLM, status: int, error: type[Exception]
) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    llm.script(Reply.error(status, "the model is on fire"))
    with pytest.raises(error, match="the model is on fire"):
        await run_agent(make_agent(llm, episodic_memory=memory), ASK)
    [episode] = await memory.load()
    assert episode.outcome == "failure"
    assert error.__name__ in episode.response
    assert "the model is on fire" in episode.response


async def test_a_failing_run_streams_error_then_raises(llm: ScriptedLLM) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    llm.script(Reply.error(400, "bad request body"))
    seen: list[StreamEvent] = []

    async def consume() -> None:
        async for event in stream_agent(make_agent(llm, episodic_memory=memory), ASK):
            seen.append(event)

    with pytest.raises(litellm.BadRequestError):
        await consume()
    kinds = [e.event for e in seen]
    assert kinds[-2:] == [EventType.EPISODE_RECORDED, EventType.ERROR]
    assert seen[-2].data["outcome"] == "failure"
    assert "bad request body" in seen[-1].data["message"]
    assert EventType.DONE not in kinds


async def test_a_crashing_tool_is_reported_to_the_model_by_default(llm: ScriptedLLM) -> None:
    def charge(amount: int) -> str:
        raise RuntimeError("card declined")

    llm.script(Reply.tool_call("charge", {"amount": 5}), Reply.text("The card was declined."))
    result = await run_agent(make_agent(llm, tools=[charge]), ASK)
    assert result.text == "The card was declined."
    assert result.tool_calls[0]["error"] == "RuntimeError: card declined"
    tool_msg = llm.requests[1].messages[-1]
    assert tool_msg["content"] == "Error executing tool 'charge': RuntimeError: card declined"


async def test_a_crashing_tool_raises_with_tool_errors_raise(llm: ScriptedLLM) -> None:
    def charge(amount: int) -> str:
        raise RuntimeError("card declined")

    memory = EpisodicMemory(InMemoryProvider())
    llm.script(Reply.tool_call("charge", {"amount": 5}))
    agent = make_agent(llm, tools=[charge], tool_errors="raise", episodic_memory=memory)
    with pytest.raises(ToolError, match="card declined") as caught:
        await run_agent(agent, ASK)
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert caught.value.tool == "charge"
    [episode] = await memory.load()
    assert episode.outcome == "failure"
    assert "ToolError" in episode.response
    assert "card declined" in episode.response
    assert episode.tools_used == ["charge"]
    assert len(llm.requests) == 1


async def test_bad_arguments_and_unknown_tools_go_back_to_the_model(llm: ScriptedLLM) -> None:
    calls: list[int] = []

    def square(n: int) -> int:
        calls.append(n)
        return n * n

    llm.script(
        Reply.tool_call("square", {"n": "not a number"}),
        Reply.tool_call("square", '{"n": 3'),  # truncated JSON
        Reply.tool_call("cube", {"n": 3}),
        Reply.tool_call("square", {"n": 3, "m": 1}),
        Reply.tool_call("square", {"n": 3}),
        Reply.text("9"),
    )
    result = await run_agent(make_agent(llm, tools=[square], tool_errors="raise"), ASK)
    assert result.text == "9"
    assert calls == [3]
    replies = [r.messages[-1]["content"] for r in llm.requests[1:5]]
    assert "argument 'n'" in replies[0]
    assert "not valid JSON" in replies[1]
    assert "unknown tool 'cube'" in replies[2]
    assert "square" in replies[2]
    assert "unexpected argument(s) ['m']" in replies[3]


# --- tool schemas ---------------------------------------------------------------------------


class Address(BaseModel):
    city: str
    zip_code: str


class Parcel(BaseModel):
    to: Address
    grams: int


def test_tool_schemas_come_from_type_hints() -> None:
    def ship(
        to: Address,
        parcel: Parcel,
        speed: Literal["slow", "fast"],
        items: list[str],
        note: str | None = None,
        weight: Annotated[float, Field(description="Kilograms.")] = 1.0,
        untyped="x",  # no annotation: a string, as in deepcrew-ai
    ) -> str:
        return ""

    agent = Agent(name="a", model="openai/x", tools=[ship])
    params = agent.tool_specs()["ship"].parameters
    assert params["required"] == ["to", "parcel", "speed", "items"]
    props = params["properties"]
    assert props["to"]["required"] == ["city", "zip_code"]
    # a nested model's $defs are hoisted to the root, where its "#/$defs/..." refs point
    ref = props["parcel"]["properties"]["to"]["$ref"]
    assert ref == "#/$defs/Address"
    assert params["$defs"]["Address"]["required"] == ["city", "zip_code"]
    assert props["speed"]["enum"] == ["slow", "fast"]
    assert props["items"] == {"type": "array", "items": {"type": "string"}}
    assert props["note"] == {"anyOf": [{"type": "string"}, {"type": "null"}]}
    assert props["weight"] == {"type": "number", "description": "Kilograms."}
    assert props["untyped"] == {"type": "string"}


async def test_tool_arguments_are_validated_into_their_types(llm: ScriptedLLM) -> None:
    got: list[Address] = []

    def ship(to: Address) -> str:
        got.append(to)
        return "shipped"

    llm.script(
        Reply.tool_call("ship", {"to": {"city": "Oslo", "zip_code": "0150"}}), Reply.text("done")
    )
    await run_agent(make_agent(llm, tools=[ship]), ASK)
    assert got == [Address(city="Oslo", zip_code="0150")]


def test_bad_tools_and_settings_are_refused_at_construction() -> None:
    def f(x: int) -> int:
        return x

    def g(*args: int) -> int:
        return 0

    with pytest.raises(ConfigurationError, match="two tools are named 'f'"):
        Agent(name="a", model="m", tools=[f, f])
    with pytest.raises(ConfigurationError, match="keyword"):
        Agent(name="a", model="m", tools=[g])
    with pytest.raises(ConfigurationError, match="max_turns"):
        Agent(name="a", model="m", max_turns=0)
    with pytest.raises(ConfigurationError, match="tool_errors"):
        Agent(name="a", model="m", tool_errors="ignore")  # type: ignore[arg-type]


# --- memory through the hook --------------------------------------------------------------


async def seeded_memory(provider: Any = None) -> tuple[EpisodicMemory, Episode]:
    memory = EpisodicMemory(provider or InMemoryProvider(), namespace="runner")
    past = await memory.record(
        Episode(
            query="Rotate the billing API key without downtime",
            response="Created a second key, moved traffic, revoked the first.",
            outcome="success",
            score=0.9,
            reflection="Keep two live keys during a rotation.",
        )
    )
    await memory.record(
        Episode(query="Refund a duplicated order", response="Refunded", outcome="success")
    )
    return memory, past


async def test_recall_happens_before_the_first_model_call(llm: ScriptedLLM) -> None:
    memory, past = await seeded_memory()
    llm.script(Reply.text("Use two live keys."))
    agent = make_agent(llm, system_prompt="You are helpful.", episodic_memory=memory)
    result = await run_agent(agent, ASK)

    [request] = llm.requests
    system = request.texts("system")
    assert system[0] == "You are helpful."  # the agent's prompt stays first
    assert system[1].startswith("## Relevant past experience")
    assert "Keep two live keys during a rotation." in system[1]
    assert "Refund" not in request.system_text
    assert request.messages[-1] == ASK[0]
    assert result.episodes_recalled == 1
    assert [e.id for e in result.recalled] == [past.id]
    [recorded] = result.recorded
    assert recorded.query == ASK[0]["content"]
    assert recorded.response == "Use two live keys."
    assert recorded.outcome == "unknown"  # no score: deepcrew-ai's rule
    assert recorded.agent_id == "assistant"
    assert len(await memory.load()) == 3


async def test_a_second_related_run_recalls_the_first(llm: ScriptedLLM) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    llm.script(Reply.text("Rotate with two keys."), Reply.text("Yes, with two keys."))
    agent = make_agent(llm, episodic_memory=memory)
    first = await run_agent(agent, [{"role": "user", "content": "How do I rotate an API key?"}])
    second = await run_agent(
        agent, [{"role": "user", "content": "Is API key rotation zero-downtime?"}]
    )
    assert first.episodes_recalled == 0
    assert "## Relevant past experience" not in llm.requests[0].system_text
    assert second.episodes_recalled == 1
    assert second.recalled[0].id == first.recorded[0].id
    assert "Rotate with two keys." in llm.requests[1].system_text


async def test_episode_events_are_verbose_only(llm: ScriptedLLM) -> None:
    memory, past = await seeded_memory()
    llm.fallback = Reply.text("Use two live keys.")
    agent = make_agent(llm, episodic_memory=memory)

    verbose = await collect(agent, StreamPolicy.verbose())
    [recalled] = of(verbose, EventType.EPISODE_RECALLED)
    assert recalled.data["count"] == 1
    assert recalled.data["ids"] == [past.id]
    assert recalled.agent_id == "assistant"
    [recorded] = of(verbose, EventType.EPISODE_RECORDED)
    stored = (await memory.load())[-1]
    assert recorded.data == {"outcome": stored.outcome, "score": stored.score, "id": stored.id}
    kinds = [e.event for e in verbose]
    assert kinds.index(EventType.EPISODE_RECALLED) < kinds.index(EventType.AGENT_START)
    assert kinds.index(EventType.AGENT_DONE) < kinds.index(EventType.EPISODE_RECORDED)

    for policy in (StreamPolicy.chat(), StreamPolicy.standard()):
        events = await collect(agent, policy)
        assert events, "the run streamed nothing"
        assert not [e for e in events if e.event.startswith("episode_")]
        assert events[-1].event == EventType.DONE


async def test_recall_failure_lets_the_run_go_on(llm: ScriptedLLM) -> None:
    provider = FlakyProvider()
    _memory, _ = await seeded_memory(provider)
    provider.fail_reads = True
    memory2 = EpisodicMemory(provider, namespace="runner")  # a cold cache must read the backend
    llm.script(Reply.text("Answer without memory."))
    stream = stream_agent(make_agent(llm, episodic_memory=memory2), ASK)
    events = [e async for e in stream]

    assert stream.result is not None
    assert stream.result.text == "Answer without memory."
    assert stream.result.episodes_recalled == 0
    assert stream.result.recall_error is not None
    assert "StorageError" in stream.result.recall_error
    [failed] = of(events, EventType.EPISODE_RECALL_FAILED)
    assert failed.data["error_type"] == "StorageError"
    assert "backend unreachable" in failed.data["error"]
    assert memory2.counters.recall_failures == 1
    assert "## Relevant past experience" not in llm.requests[0].system_text


async def test_record_failure_is_visible_on_the_result(llm: ScriptedLLM) -> None:
    provider = FlakyProvider()
    memory = EpisodicMemory(provider)
    provider.fail_writes = True
    llm.script(Reply.text("Done."))
    stream = stream_agent(make_agent(llm, episodic_memory=memory), ASK)
    events = [e async for e in stream]
    result = stream.result
    assert result is not None
    assert result.text == "Done."
    assert result.recorded == []
    [error] = result.record_errors
    assert "StorageError" in error
    assert "backend unreachable" in error
    assert memory.counters.record_failures == 1
    [failed] = of(events, EventType.EPISODE_RECORD_FAILED)
    assert failed.data["outcome"] == "unknown"
    assert not of(events, EventType.EPISODE_RECORDED)


async def test_a_failed_run_whose_record_also_fails_still_raises_the_run_error(
    llm: ScriptedLLM,
) -> None:
    provider = FlakyProvider()
    memory = EpisodicMemory(provider)
    provider.fail_writes = True
    llm.script(Reply.error(400, "model refused"))
    with pytest.raises(litellm.BadRequestError, match="model refused"):
        await run_agent(make_agent(llm, episodic_memory=memory), ASK)
    assert memory.counters.record_failures == 1


def test_invalid_run_arguments() -> None:
    agent = Agent(name="a", model="m")
    with pytest.raises(ConfigurationError, match="messages"):
        stream_agent(agent, "hello")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="Agent"):
        stream_agent("agent", [])  # type: ignore[arg-type]


async def test_leaving_a_stream_early_ends_the_run_without_an_episode(llm: ScriptedLLM) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    llm.script(Reply.text("a long answer that the consumer stops reading"))
    stream = stream_agent(make_agent(llm, episodic_memory=memory), ASK)
    events = aiter(stream)
    async with aclosing(events):
        async for event in events:
            if event.event == EventType.TEXT_DELTA:
                break
    assert stream.result is None
    assert await memory.load() == []  # cancelled, not failed: no outcome to record
    with pytest.raises(RuntimeError, match="once"):
        aiter(stream)


async def test_a_consumer_stopping_at_agent_done_keeps_the_episode(llm: ScriptedLLM) -> None:
    memory = EpisodicMemory(InMemoryProvider())
    llm.script(Reply.text("answer"))
    stream = stream_agent(make_agent(llm, episodic_memory=memory), ASK)
    events = aiter(stream)
    async with aclosing(events):
        async for event in events:
            if event.event == EventType.AGENT_DONE:
                break
    [episode] = await memory.load()
    assert episode.response == "answer"
    assert stream.result is not None
    assert stream.result.recorded == [episode]
