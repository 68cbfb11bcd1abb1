"""A scripted OpenAI-compatible chat and embeddings server on 127.0.0.1, for driving litellm in
tests.

Tests never patch litellm: they point it at this server, which answers from a per-test script
and records every request it receives. litellm goes through its real HTTP path (request
building, SSE parsing, tool-call assembly, usage, error mapping).

Use the ``llm`` fixture (``tests/conftest.py``)::

    pytestmark = pytest.mark.anyio

    async def test_answers(llm: ScriptedLLM) -> None:
        llm.script(
            Reply.tool_call("lookup", {"city": "Paris"}),   # turn 1: the model calls a tool
            Reply.text("It is sunny in Paris."),             # turn 2: the final answer
        )
        response = await litellm.acompletion(
            model="openai/scripted", messages=[...], stream=True, **llm.params
        )
        ...
        assert "## Relevant past experience" in llm.requests[0].system_text

What the server does:

- ``POST /v1/chat/completions`` and ``POST /chat/completions``. ``llm.base_url`` ends in
  ``/v1``; litellm is called with ``model="openai/<any name>"``, ``api_base=llm.base_url``,
  ``api_key="test"`` (``llm.params`` holds the last two).
- ``"stream": true`` gets Server-Sent Events (``data: {chunk}`` ... ``data: [DONE]``) with
  the text split into several deltas and tool calls split into several argument fragments;
  otherwise one ``chat.completion`` JSON object.
- Every answer carries ``usage``; a stream sends it in a final chunk with no choices when the
  request asked for ``stream_options.include_usage``. The counts are the reply's
  ``prompt_tokens``/``completion_tokens`` when given, else words in the request / reply.
- ``Reply.error(status, message)`` answers with that HTTP status and an OpenAI error body
  (``{"error": {"message", "type", "param", "code"}}``).
- ``delay=`` on any reply holds the answer that long first (a hanging model; closing the
  server cuts the wait short).
- Replies are a queue: each request takes the first queued reply whose ``when`` predicate
  accepts it (no predicate accepts anything). ``llm.fallback`` (a reply, or ``None``) answers
  when nothing in the queue matches; without one the server answers HTTP 500 and records the
  request in ``llm.unscripted``, which the fixture fails the test on.
- ``llm.requests`` lists every request (``path``, ``body``, ``headers``), in arrival order.

The Responses API (``POST /v1/responses`` and ``POST /responses``), as the OpenAI Agents SDK's
default model calls it, takes the same queue of replies: the text becomes one output
``message``, each tool call a ``function_call`` item, and ``usage`` counts as above. With
``"stream": true`` it answers the API's named Server-Sent Events (``response.created``, each
item added, its text or arguments in several deltas, done, ``response.completed``). ``request.instructions`` and ``request.input_items`` read such a
request.

Embeddings (``POST /v1/embeddings`` and ``POST /embeddings``), called through litellm as::

    response = await litellm.aembedding(
        model="openai/wordllama", input=["customer charged twice"], **llm.params
    )
    vector = response.data[0]["embedding"]

- OpenAI's format: ``input`` is a string or a list of at most 2048 non-empty strings;
  ``encoding_format`` ``"float"`` (the default) or ``"base64"`` (little-endian float32). The
  openai client asks for base64 when called without a format and decodes it; litellm sends
  no format unless given one, and hands base64 strings back undecoded. ``dimensions`` may
  equal the model's, or shorten a WordLlama model to 64/128 (litellm sends it to an
  ``openai/`` model only with ``allowed_openai_params=["dimensions"]``).
  Anything else is HTTP 400 with an OpenAI error body; an unknown model is HTTP 404
  (``code: "model_not_found"``), a model whose package is missing HTTP 400 naming the
  ``pip install`` command. ``usage`` counts words in the inputs.
- The model name picks a real, offline model from ``tests/embedding_models.py``:
  ``wordllama`` (256 dims; ``wordllama-64``/``-128``/``-256``), ``minilm`` (384) or
  ``hash-<dim>`` (a deterministic bag of words).
- ``llm.script_embeddings(EmbedReply...)`` queues answers for embeddings requests only
  (``when=`` and ``delay=`` as for chat): ``EmbedReply.error(status, message)``,
  ``EmbedReply.vectors([[...], ...])`` (exactly these, whatever the inputs),
  ``EmbedReply.wrong_dimension(n)`` (one ``hash-<n>`` vector per input, whatever the model),
  ``EmbedReply.real()`` (the model's vectors; with ``delay=``, a slow embedder). With no
  matching reply queued, ``llm.embed_fallback`` answers (an ``EmbedReply``, for an embedder
  that fails on every attempt), or when it is ``None`` the real model (never an "unscripted"
  failure).
- Every embeddings request is in ``llm.requests`` (``request.inputs`` lists its texts), and
  ``llm.embedded`` holds the inputs of each well-formed one, in order: one entry per call,
  so a test counts calls and checks batching.

Note that litellm/openai retry HTTP 408, 409, 429, 5xx and timeouts: pass ``max_retries=0``
(or script one error per attempt) when a test wants the first error to surface. Embeddings
cannot opt out: litellm 1.110's ``aembedding`` turns ``max_retries=0`` into its default of 2
(``max_retries or litellm.DEFAULT_MAX_RETRIES``), so such an error is tried three times:
script three, or set ``llm.embed_fallback``. Scripted embedding errors carry
``retry-after-ms: 1``, so those retries do not sleep.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import embedding_models

__all__ = ["EmbedReply", "RecordedRequest", "Reply", "ScriptedLLM", "ToolCall", "scripted_llm"]

_log = logging.getLogger(__name__)
_EMBED_PATHS = ("/v1/embeddings", "/embeddings")
_CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
_RESPONSES_PATHS = ("/v1/responses", "/responses")
_MAX_EMBED_INPUTS = 2048  # the OpenAI API's limit per request

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    429: "rate_limit_exceeded",
    500: "server_error",
    503: "server_error",
}


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it."""

    path: str
    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", []))

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def tools(self) -> list[dict[str, Any]]:
        return list(self.body.get("tools") or [])

    def texts(self, role: str) -> list[str]:
        """The text of every message with *role*, in order."""
        return [_text(m.get("content")) for m in self.messages if m.get("role") == role]

    @property
    def system_text(self) -> str:
        """Every system message's text, joined with blank lines."""
        return "\n\n".join(self.texts("system"))

    @property
    def instructions(self) -> str:
        """A Responses API request's ``instructions`` ("" for anything else)."""
        value = self.body.get("instructions")
        return value if isinstance(value, str) else ""

    @property
    def input_items(self) -> list[dict[str, Any]]:
        """A Responses API request's ``input`` as a list of items (a lone string is one user
        message); empty for anything else."""
        value = self.body.get("input")
        if self.path not in _RESPONSES_PATHS:
            return []
        if isinstance(value, str):
            return [{"role": "user", "content": value}]
        return [item for item in value or [] if isinstance(item, dict)]

    @property
    def last_user_text(self) -> str:
        users = self.texts("user")
        return users[-1] if users else ""

    @property
    def inputs(self) -> list[str]:
        """An embeddings request's ``input`` as a list of texts (a lone string is one text);
        empty for anything else."""
        value = self.body.get("input")
        if isinstance(value, str):
            return [value]
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return list(value)
        return []


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str = ""

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments  # deliberately raw: lets a test send malformed JSON
        return json.dumps(self.arguments)


@dataclass(frozen=True)
class Reply:
    """One scripted answer. Build with :meth:`text`, :meth:`tool_call`, :meth:`tool_calls`,
    :meth:`json` or :meth:`error`."""

    content: str | None = None
    tool_calls_: tuple[ToolCall, ...] = ()
    status: int = 200
    error_message: str = ""
    error_type: str | None = None
    error_code: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    delay: float = 0.0
    when: Callable[[RecordedRequest], bool] | None = None

    @classmethod
    def text(cls, content: str, **options: Any) -> Reply:
        return cls(content=content, **options)

    @classmethod
    def json(cls, value: Any, **options: Any) -> Reply:
        return cls(content=json.dumps(value), **options)

    @classmethod
    def tool_call(
        cls, name: str, arguments: dict[str, Any] | str | None = None, **options: Any
    ) -> Reply:
        return cls.tool_calls(
            [ToolCall(name, arguments if arguments is not None else {})], **options
        )

    @classmethod
    def tool_calls(
        cls,
        calls: Sequence[ToolCall | tuple[str, dict[str, Any]]],
        *,
        content: str | None = None,
        **options: Any,
    ) -> Reply:
        built = tuple(c if isinstance(c, ToolCall) else ToolCall(c[0], c[1]) for c in calls)
        return cls(content=content, tool_calls_=built, **options)

    @classmethod
    def error(
        cls,
        status: int,
        message: str = "scripted error",
        *,
        type: str | None = None,
        code: str | None = None,
        **options: Any,
    ) -> Reply:
        if status < 400:
            raise ValueError(f"an error reply needs a 4xx/5xx status, not {status}")
        return cls(
            status=status, error_message=message, error_type=type, error_code=code, **options
        )


@dataclass(frozen=True)
class EmbedReply:
    """One scripted answer to an embeddings request. Build with :meth:`vectors`,
    :meth:`wrong_dimension`, :meth:`error` or :meth:`real`; ``delay=`` and ``when=`` work as on
    :class:`Reply`."""

    vectors_: tuple[tuple[float, ...], ...] | None = None
    dimension: int | None = None
    status: int = 200
    error_message: str = ""
    error_type: str | None = None
    error_code: str | None = None
    delay: float = 0.0
    when: Callable[[RecordedRequest], bool] | None = None

    @classmethod
    def vectors(cls, vectors: Sequence[Sequence[float]], **options: Any) -> EmbedReply:
        """Answer exactly *vectors*, however many inputs the request had (so a test can send
        too few or too many)."""
        return cls(vectors_=tuple(tuple(float(x) for x in v) for v in vectors), **options)

    @classmethod
    def wrong_dimension(cls, n: int, **options: Any) -> EmbedReply:
        """Answer one unit vector of *n* components per input (the ``hash-<n>`` model's),
        whatever the requested model's dimension."""
        if not 1 <= n <= embedding_models.HASH_MAX_DIMENSION:  # fail here, not in the server
            limit = embedding_models.HASH_MAX_DIMENSION
            raise ValueError(f"wrong_dimension needs 1 <= n <= {limit}, not {n}")
        return cls(dimension=n, **options)

    @classmethod
    def real(cls, **options: Any) -> EmbedReply:
        """Answer with the requested model's real vectors: with ``delay=``, a slow embedder."""
        return cls(**options)

    @classmethod
    def error(
        cls,
        status: int,
        message: str = "scripted error",
        *,
        type: str | None = None,
        code: str | None = None,
        **options: Any,
    ) -> EmbedReply:
        if status < 400:
            raise ValueError(f"an error reply needs a 4xx/5xx status, not {status}")
        return cls(
            status=status, error_message=message, error_type=type, error_code=code, **options
        )


class ScriptedLLM:
    """The server. Start it with :func:`scripted_llm` (or the ``llm`` fixture)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: list[Reply] = []
        self._embed_queue: list[EmbedReply] = []
        self._closing = threading.Event()
        self._connections = 0
        self.requests: list[RecordedRequest] = []
        self.embedded: list[list[str]] = []
        self.embed_fallback: EmbedReply | None = None
        self.unscripted: list[RecordedRequest] = []
        self.fallback: Reply | None = None
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},  # shutdown() waits up to one poll
            name="scripted-llm",
            daemon=True,
        )
        port = self._server.server_address[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"

    @property
    def params(self) -> dict[str, str]:
        """The keyword arguments that point litellm at this server."""
        return {"api_base": self.base_url, "api_key": "test"}

    def script(self, *replies: Reply) -> None:
        """Queue *replies*; each request consumes the first one that matches it."""
        with self._lock:
            self._queue.extend(replies)

    @property
    def pending(self) -> list[Reply]:
        """Scripted replies no request has consumed yet."""
        with self._lock:
            return list(self._queue)

    def script_embeddings(self, *replies: EmbedReply) -> None:
        """Queue *replies* for embeddings requests (chat requests never see them); each request
        consumes the first one that matches it, and answers from the real model when none does."""
        with self._lock:
            self._embed_queue.extend(replies)

    @property
    def pending_embeddings(self) -> list[EmbedReply]:
        """Scripted embedding replies no request has consumed yet."""
        with self._lock:
            return list(self._embed_queue)

    @property
    def open_connections(self) -> int:
        """How many client connections the server holds open right now (a client keeps one
        open between requests until it closes it)."""
        with self._lock:
            return self._connections

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # --- called by the handler threads -----------------------------------------------

    def _take(self, request: RecordedRequest) -> Reply | None:
        with self._lock:
            self.requests.append(request)
            for i, reply in enumerate(self._queue):
                if reply.when is None or reply.when(request):
                    return self._queue.pop(i)
            if self.fallback is not None:
                return self.fallback
            self.unscripted.append(request)
            return None

    def _take_embedding(self, request: RecordedRequest, valid: bool) -> EmbedReply | None:
        with self._lock:
            self.requests.append(request)
            if not valid:
                return None
            self.embedded.append(request.inputs)
            for i, reply in enumerate(self._embed_queue):
                if reply.when is None or reply.when(request):
                    return self._embed_queue.pop(i)
            return self.embed_fallback

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            self._closing.wait(seconds)


@contextmanager
def scripted_llm() -> Iterator[ScriptedLLM]:
    """Run a :class:`ScriptedLLM` in a background thread for the duration of the block."""
    server = ScriptedLLM()
    server.start()
    try:
        yield server
    finally:
        server.close()


# --- the HTTP side ------------------------------------------------------------------------


def _handler_for(llm: ScriptedLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in separate writes: with Nagle's algorithm on, the body
        # waits for the client's delayed ACK of the headers (~40 ms per answer).
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            pass

        def setup(self) -> None:
            with llm._lock:
                llm._connections += 1
            super().setup()

        def finish(self) -> None:
            try:
                super().finish()
            finally:
                with llm._lock:
                    llm._connections -= 1

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0].rstrip("/")
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if path not in _CHAT_PATHS + _EMBED_PATHS + _RESPONSES_PATHS:
                self._send_json(404, _error_body(404, f"no route {path}", None, None))
                return
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError as exc:
                self._send_json(
                    400, _error_body(400, f"request body is not JSON: {exc}", None, None)
                )
                return
            if not isinstance(body, dict):
                message = f"request body is a JSON {type(body).__name__}, not an object"
                self._send_json(400, _error_body(400, message, None, None))
                return
            request = RecordedRequest(path, body, {k.lower(): v for k, v in self.headers.items()})
            if path in _EMBED_PATHS:
                self._answer_embeddings(request)
            else:
                self._answer_chat(request)

        def _answer_chat(self, request: RecordedRequest) -> None:
            reply = llm._take(request)
            if reply is None:
                message = "the scripted server has no reply left for this request"
                self._send_json(500, _error_body(500, message, None, None))
                return
            llm._wait(reply.delay)
            if llm._closing.is_set():
                self.close_connection = True
                return
            try:
                if reply.status >= 400:
                    body_out = _error_body(
                        reply.status, reply.error_message, reply.error_type, reply.error_code
                    )
                    self._send_json(reply.status, body_out)
                elif request.path in _RESPONSES_PATHS and request.stream:
                    self._send_response_stream(request, reply)
                elif request.path in _RESPONSES_PATHS:
                    self._send_json(200, _response(request, reply))
                elif request.stream:
                    self._send_stream(request, reply)
                else:
                    self._send_json(200, _completion(request, reply))
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout): nothing to answer

        def _answer_embeddings(self, request: RecordedRequest) -> None:
            problem = _embedding_request_problem(request.body)
            reply = llm._take_embedding(request, valid=problem is None)
            if problem is not None:
                self._send_json(400, _error_body(400, problem, None, None))
                return
            if reply is not None:
                llm._wait(reply.delay)
                if llm._closing.is_set():
                    self.close_connection = True
                    return
            try:
                if reply is not None and reply.status >= 400:
                    body_out = _error_body(
                        reply.status, reply.error_message, reply.error_type, reply.error_code
                    )
                    # litellm retries embeddings whatever max_retries says: keep its waits short
                    self._send_json(reply.status, body_out, {"retry-after-ms": "1"})
                    return
                try:
                    vectors = _embedding_vectors(request, reply)
                    payload = _embedding_response(request, vectors)
                except _EmbeddingRefused as refused:
                    self._send_json(
                        refused.status,
                        _error_body(refused.status, str(refused), None, refused.code),
                    )
                    return
                self._send_json(200, payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout): nothing to answer

        def _send_json(
            self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
        ) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _send_stream(self, request: RecordedRequest, reply: Reply) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for chunk in _stream_chunks(request, reply):
                self._write_chunk(f"data: {json.dumps(chunk)}\n\n".encode())
            self._write_chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _send_response_stream(self, request: RecordedRequest, reply: Reply) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for event in _response_events(request, reply):
                line = f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"
                self._write_chunk(line.encode())
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _write_chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    return Handler


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def _words(text: str) -> int:
    return len(text.split())


def _usage(request: RecordedRequest, reply: Reply) -> dict[str, int]:
    prompt = reply.prompt_tokens
    if prompt is None:
        prompt = sum(_words(_text(m.get("content"))) for m in request.messages)
    completion = reply.completion_tokens
    if completion is None:
        completion = _words(reply.content or "") + sum(
            _words(c.arguments_json()) + 1 for c in reply.tool_calls_
        )
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _call_ids(reply: Reply) -> list[str]:
    return [c.id or f"call_{i}_{uuid.uuid4().hex[:8]}" for i, c in enumerate(reply.tool_calls_)]


def _finish_reason(reply: Reply) -> str:
    return "tool_calls" if reply.tool_calls_ else "stop"


def _completion(request: RecordedRequest, reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls_:
        message["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json()},
            }
            for call_id, call in zip(_call_ids(reply), reply.tool_calls_, strict=True)
        ]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": [{"index": 0, "message": message, "finish_reason": _finish_reason(reply)}],
        "usage": _usage(request, reply),
    }


def _response(request: RecordedRequest, reply: Reply) -> dict[str, Any]:
    """A Responses API ``response`` object: the reply's text as one output message, then one
    ``function_call`` item per tool call."""
    output: list[dict[str, Any]] = []
    if reply.content is not None:
        output.append(
            {
                "type": "message",
                "id": f"msg_{uuid.uuid4().hex[:12]}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": reply.content, "annotations": []}],
            }
        )
    for call_id, call in zip(_call_ids(reply), reply.tool_calls_, strict=True):
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{call_id}",
                "call_id": call_id,
                "name": call.name,
                "arguments": call.arguments_json(),
                "status": "completed",
            }
        )
    usage = _usage(request, reply)
    return {
        "id": f"resp_{uuid.uuid4().hex[:12]}",
        "object": "response",
        "created_at": time.time(),
        "model": request.model,
        "status": "completed",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": request.body.get("tool_choice") or "auto",
        "tools": [],
        "usage": {
            "input_tokens": usage["prompt_tokens"],
            "output_tokens": usage["completion_tokens"],
            "total_tokens": usage["total_tokens"],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def _response_events(request: RecordedRequest, reply: Reply) -> Iterator[dict[str, Any]]:
    """The Responses API's stream for *reply*: created, each output item added, its text or
    arguments in several deltas, done, then ``response.completed`` with the whole response."""
    final = _response(request, reply)
    sequence = iter(range(1_000_000))

    def event(kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, "sequence_number": next(sequence), **fields}

    yield event("response.created", response={**final, "status": "in_progress", "output": []})
    for index, item in enumerate(final["output"]):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            yield event(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "content": []},
            )
            part = {"type": "output_text", "text": "", "annotations": []}
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            yield event("response.content_part.added", part=part, **where)
            for piece in re.findall(r"\s*\S+\s*", text) or [text]:
                yield event("response.output_text.delta", delta=piece, logprobs=[], **where)
            yield event("response.output_text.done", text=text, logprobs=[], **where)
            yield event("response.content_part.done", part=item["content"][0], **where)
        else:
            yield event(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "arguments": ""},
            )
            where = {"item_id": item["id"], "output_index": index}
            for fragment in _pieces(item["arguments"], 7):
                yield event("response.function_call_arguments.delta", delta=fragment, **where)
            yield event(
                "response.function_call_arguments.done",
                arguments=item["arguments"],
                name=item["name"],
                **where,
            )
        yield event("response.output_item.done", output_index=index, item=item)
    yield event("response.completed", response=final)


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _stream_chunks(request: RecordedRequest, reply: Reply) -> Iterator[dict[str, Any]]:
    base = {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": request.model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    yield chunk({"role": "assistant", "content": ""})
    if reply.content:
        # word by word (whitespace kept), so a consumer sees several deltas
        for piece in re.findall(r"\s*\S+\s*", reply.content) or [reply.content]:
            yield chunk({"content": piece})
    for index, (call_id, call) in enumerate(zip(_call_ids(reply), reply.tool_calls_, strict=True)):
        yield chunk(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": ""},
                    }
                ]
            }
        )
        for fragment in _pieces(call.arguments_json(), 7):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
    yield chunk({}, _finish_reason(reply))
    options = request.body.get("stream_options") or {}
    if options.get("include_usage"):
        yield {**base, "choices": [], "usage": _usage(request, reply)}


# --- embeddings ---------------------------------------------------------------------------


class _EmbeddingRefused(Exception):
    """An embeddings request the server answers with an HTTP error."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def _embedding_request_problem(body: dict[str, Any]) -> str | None:
    """What is wrong with an embeddings request body, in the words of a 400, or None."""
    value = body.get("input")
    if isinstance(value, str):
        texts = [value]
    elif isinstance(value, list) and value:
        if not all(isinstance(item, str) for item in value):
            # token arrays are valid OpenAI input but mean nothing to these models
            return "'input' must be a string or a list of strings (token arrays unsupported)"
        texts = value
    else:
        return "'input' must be a non-empty string or a non-empty list of strings"
    if len(texts) > _MAX_EMBED_INPUTS:
        return f"'input' has {len(texts)} items; at most {_MAX_EMBED_INPUTS} per request"
    for index, text in enumerate(texts):
        if not text:
            return f"'input[{index}]' is empty: every input must be a non-empty string"
        if not text.isascii():
            try:
                text.encode()
            except UnicodeEncodeError as exc:  # JSON can carry a lone surrogate; UTF-8 cannot
                return f"'input[{index}]' is not valid Unicode text: {exc.reason}"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "'model' must be a non-empty string"
    if body.get("encoding_format", "float") not in ("float", "base64"):
        return f"'encoding_format' must be 'float' or 'base64', not {body['encoding_format']!r}"
    dimensions = body.get("dimensions")
    if dimensions is not None and (
        not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions < 1
    ):
        return f"'dimensions' must be a positive integer, not {dimensions!r}"
    return None


def _embedding_vectors(request: RecordedRequest, reply: EmbedReply | None) -> list[list[float]]:
    if reply is not None and reply.vectors_ is not None:
        return [list(v) for v in reply.vectors_]
    if reply is not None and reply.dimension is not None:
        return embedding_models.embed(f"hash-{reply.dimension}", request.inputs)
    model = _backend_model(request)
    try:
        return embedding_models.embed(model, request.inputs)
    except embedding_models.ModelNotInstalledError as exc:
        raise _EmbeddingRefused(400, str(exc), "model_not_installed") from exc
    except (TypeError, ValueError) as exc:
        raise _EmbeddingRefused(400, str(exc)) from exc
    except Exception as exc:  # a broken backend: the caller sees the failure, never a hang
        _log.exception("embedding model %r failed", model)
        raise _EmbeddingRefused(500, f"embedding backend failed: {exc!r}") from exc


def _backend_model(request: RecordedRequest) -> str:
    """The model that answers *request*: its name, or a shorter WordLlama when it asks for
    fewer ``dimensions`` (the only models here trained to be truncated)."""
    model = request.model
    try:
        native = embedding_models.dimension(model)
    except embedding_models.UnknownModelError as exc:
        raise _EmbeddingRefused(404, str(exc), "model_not_found") from exc
    wanted = request.body.get("dimensions")
    if wanted is None or wanted == native:
        return model
    truncated = f"wordllama-{wanted}"
    if model.startswith("wordllama") and truncated in embedding_models.MODELS and wanted < native:
        return truncated
    raise _EmbeddingRefused(
        400, f"model {model!r} does not support dimensions={wanted} (its vectors have {native})"
    )


def _embedding_response(request: RecordedRequest, vectors: list[list[float]]) -> dict[str, Any]:
    as_base64 = request.body.get("encoding_format") == "base64"
    tokens = sum(_words(text) for text in request.inputs)
    return {
        "object": "list",
        "data": [
            {
                "object": "embedding",
                "index": index,
                "embedding": _base64_floats(vector) if as_base64 else vector,
            }
            for index, vector in enumerate(vectors)
        ],
        "model": request.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def _base64_floats(vector: list[float]) -> str:
    """The OpenAI API's base64 encoding: little-endian float32, back to back."""
    try:
        packed = struct.pack(f"<{len(vector)}f", *vector)
    except OverflowError as exc:  # only a scripted vector can hold such a value
        raise _EmbeddingRefused(500, f"a vector does not fit float32 for base64: {exc}") from exc
    return base64.b64encode(packed).decode("ascii")


def _error_body(status: int, message: str, type: str | None, code: str | None) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": type or _ERROR_TYPES.get(status, "api_error"),
            "param": None,
            "code": code,
        }
    }
