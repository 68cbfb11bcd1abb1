"""The scripted server speaks the OpenAI protocol well enough for litellm's real HTTP path."""

from __future__ import annotations

import json
import time
from typing import Any

import litellm
import pytest
from llm_server import Reply, ScriptedLLM, ToolCall

pytestmark = pytest.mark.anyio

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Say hello to the world"},
]


async def _stream(llm: ScriptedLLM, **kwargs: Any) -> tuple[str, dict[int, dict[str, str]], Any]:
    response = await litellm.acompletion(
        model="openai/scripted",
        messages=MESSAGES,
        stream=True,
        stream_options={"include_usage": True},
        **llm.params,
        **kwargs,
    )
    text: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    usage = None
    async for chunk in response:
        if chunk.choices:
            delta = chunk.choices[0].delta
            if delta.content:
                text.append(delta.content)
            for tc in delta.tool_calls or []:
                buf = calls.setdefault(tc.index, {"id": "", "name": "", "args": ""})
                buf["id"] = tc.id or buf["id"]
                if tc.function and tc.function.name:
                    buf["name"] = tc.function.name
                if tc.function and tc.function.arguments:
                    buf["args"] += tc.function.arguments
        if getattr(chunk, "usage", None):
            usage = chunk.usage
    return "".join(text), calls, usage


async def test_non_streaming_text_and_usage(llm: ScriptedLLM) -> None:
    llm.script(Reply.text("Hello, world!", prompt_tokens=12, completion_tokens=3))
    response = await litellm.acompletion(model="openai/scripted", messages=MESSAGES, **llm.params)
    assert response.choices[0].message.content == "Hello, world!"
    assert response.usage.prompt_tokens == 12
    assert response.usage.completion_tokens == 3
    [request] = llm.requests
    assert request.path == "/v1/chat/completions"
    assert request.model == "scripted"
    assert request.system_text == "You are terse."
    assert request.last_user_text == "Say hello to the world"
    assert not request.stream
    assert request.headers["authorization"] == "Bearer test"


async def test_streaming_text_arrives_in_several_deltas_with_usage_last(llm: ScriptedLLM) -> None:
    llm.script(Reply.text("Hello there, wide world!"))
    response = await litellm.acompletion(
        model="openai/scripted",
        messages=MESSAGES,
        stream=True,
        stream_options={"include_usage": True},
        **llm.params,
    )
    deltas = []
    usage = None
    async for chunk in response:
        if chunk.choices and chunk.choices[0].delta.content:
            deltas.append(chunk.choices[0].delta.content)
        if getattr(chunk, "usage", None):
            usage = chunk.usage
    assert "".join(deltas) == "Hello there, wide world!"
    assert len(deltas) >= 3
    assert usage is not None
    # default counts: words in the request's messages / in the reply
    assert usage.prompt_tokens == 3 + 5
    assert usage.completion_tokens == 4
    assert llm.requests[0].stream


async def test_streamed_tool_calls_are_reassembled(llm: ScriptedLLM) -> None:
    llm.script(
        Reply.tool_calls(
            [
                ToolCall("get_weather", {"city": "Paris", "unit": "celsius"}, id="call_a"),
                ("get_time", {"tz": "Europe/Paris"}),
            ]
        )
    )
    text, calls, _ = await _stream(llm, tools=[_tool("get_weather"), _tool("get_time")])
    assert text == ""
    assert calls[0]["id"] == "call_a"
    assert calls[0]["name"] == "get_weather"
    assert json.loads(calls[0]["args"]) == {"city": "Paris", "unit": "celsius"}
    assert calls[1]["name"] == "get_time"
    assert json.loads(calls[1]["args"]) == {"tz": "Europe/Paris"}
    assert calls[1]["id"].startswith("call_")
    assert [t["function"]["name"] for t in llm.requests[0].tools] == ["get_weather", "get_time"]


async def test_non_streaming_tool_calls(llm: ScriptedLLM) -> None:
    llm.script(Reply.tool_call("get_weather", {"city": "Oslo"}))
    response = await litellm.acompletion(
        model="openai/scripted", messages=MESSAGES, tools=[_tool("get_weather")], **llm.params
    )
    [call] = response.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Oslo"}
    assert response.choices[0].finish_reason == "tool_calls"


async def test_json_reply(llm: ScriptedLLM) -> None:
    llm.script(Reply.json({"score": 0.75, "issues": ["vague"]}))
    response = await litellm.acompletion(model="openai/scripted", messages=MESSAGES, **llm.params)
    assert json.loads(response.choices[0].message.content) == {"score": 0.75, "issues": ["vague"]}


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, litellm.BadRequestError),
        (429, litellm.RateLimitError),
        (500, litellm.InternalServerError),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
async def test_scripted_errors_map_to_litellm_exceptions(
    llm: ScriptedLLM, status: int, error: type[Exception], stream: bool
) -> None:
    llm.script(Reply.error(status, f"scripted {status}"))

    async def call() -> None:
        response = await litellm.acompletion(
            model="openai/scripted", messages=MESSAGES, stream=stream, max_retries=0, **llm.params
        )
        if stream:  # some clients raise on the first chunk rather than on the call
            async for _ in response:
                pass

    with pytest.raises(error, match=f"scripted {status}"):
        await call()
    assert len(llm.requests) == 1


async def test_predicates_pick_the_matching_reply(llm: ScriptedLLM) -> None:
    llm.script(
        Reply.text("about cats", when=lambda r: "cat" in r.last_user_text),
        Reply.text("anything else"),
    )
    first = await litellm.acompletion(
        model="openai/scripted", messages=[{"role": "user", "content": "dogs?"}], **llm.params
    )
    second = await litellm.acompletion(
        model="openai/scripted", messages=[{"role": "user", "content": "cats?"}], **llm.params
    )
    assert first.choices[0].message.content == "anything else"
    assert second.choices[0].message.content == "about cats"
    assert llm.pending == []


async def test_a_hanging_reply_times_the_client_out(llm: ScriptedLLM) -> None:
    llm.script(Reply.text("too late", delay=30))
    started = time.monotonic()
    with pytest.raises(litellm.Timeout):
        await litellm.acompletion(
            model="openai/scripted", messages=MESSAGES, timeout=0.5, max_retries=0, **llm.params
        )
    assert time.monotonic() - started < 10


async def test_unscripted_requests_are_recorded(llm: ScriptedLLM) -> None:
    with pytest.raises(litellm.InternalServerError, match="no reply left"):
        await litellm.acompletion(
            model="openai/scripted", messages=MESSAGES, max_retries=0, **llm.params
        )
    assert len(llm.unscripted) == 1
    llm.unscripted.clear()  # expected here; the fixture would fail the test otherwise


async def test_fallback_answers_when_the_queue_is_empty(llm: ScriptedLLM) -> None:
    llm.fallback = Reply.text("default answer")
    for _ in range(2):
        response = await litellm.acompletion(
            model="openai/scripted", messages=MESSAGES, **llm.params
        )
        assert response.choices[0].message.content == "default answer"


def _tool(name: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": name,
            "parameters": {"type": "object", "properties": {}, "required": []},
        },
    }
