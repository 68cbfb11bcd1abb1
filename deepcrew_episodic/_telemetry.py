"""OpenTelemetry spans for the memory's operations, on the GenAI memory conventions.

Off by default. A memory built without ``telemetry`` runs one ``is None`` check per call here
and never imports opentelemetry. With it, each operation is one span of the conventions'
``gen_ai.memory.client`` type (open-telemetry/semantic-conventions-genai, status development):
named for its ``gen_ai.operation.name``, kind ``INTERNAL`` (the memory runs in the caller's
process, whatever its store; a store's own instrumentation, such as redis-py's, adds its
``CLIENT`` spans below it), a child of the caller's current span.

=================  ===================  ===================================================
method             operation            what the span carries
=================  ===================  ===================================================
``record``         ``create_memory``    the new record's id, count 1, its outcome
``explain``        ``search_memory``    how many episodes came back, top k, intent, ranking
(and ``recall``)
``grade``          ``update_memory``    the graded record's id, count 1, the grade's outcome
``used``           ``update_memory``    how many records were counted used
``forget``         ``delete_memory``    how many records were deleted (a dry run: no span)
``sweep``          ``delete_memory``    how many expired records were deleted
``shrink``         ``delete_memory``    how many records were deleted
``clear``          ``delete_memory``    no record id: every record of the store
=================  ===================  ===================================================

Every span has ``gen_ai.memory.store.id`` (the namespace) and ``code.function.name``. The query
text (``gen_ai.memory.query.text``) and the records' contents (``gen_ai.memory.records``) are
opt-in content: only with ``Telemetry(capture_content=True)`` or the conventions' environment
variable, redacted with the memory's redactor (the built-in rules when the memory's redaction is
off: a trace leaves the process), hidden characters escaped, each text cut. A failure sets
``error.type`` and the span's error status, and the exception goes on as before.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ._exceptions import ConfigurationError, MissingDependencyError
from ._recall import INTENTS
from ._redact import Redactor, safe_message
from ._unicode import escape_hidden

if TYPE_CHECKING:
    from ._log import Counters

__all__ = ["Telemetry", "Tracing", "traced", "tracing"]

log = logging.getLogger("deepcrew_episodic")

# The conventions' attribute keys (gen_ai.memory.client span, error.type, code.function.name).
OPERATION = "gen_ai.operation.name"
STORE_ID = "gen_ai.memory.store.id"
RECORD_ID = "gen_ai.memory.record.id"
RECORD_COUNT = "gen_ai.memory.record.count"
QUERY_TEXT = "gen_ai.memory.query.text"
RECORDS = "gen_ai.memory.records"
ERROR_TYPE = "error.type"
FUNCTION = "code.function.name"
# This library's own, beside them.
TOP_K = "deepcrew_episodic.recall.top_k"
INTENT = "deepcrew_episodic.recall.intent"
RANKING = "deepcrew_episodic.recall.ranking"
OUTCOME = "deepcrew_episodic.outcome"
VERIFIED = "deepcrew_episodic.grade.verified"
CONTENT_ATTRIBUTES = (QUERY_TEXT, RECORDS)

# The conventions' opt-in for content; "true" (older instrumentations) or a mode that puts
# content on spans (opentelemetry-util-genai's). EVENT_ONLY does not: this library emits no events.
CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_CONTENT_ON = frozenset({"true", "span_only", "span_and_event"})
ID_CHARS = 256
F = TypeVar("F", bound=Callable[..., Awaitable[Any]])
T = TypeVar("T")


@dataclass(frozen=True)
class Telemetry:
    """How a memory reports its operations as OpenTelemetry spans
    (``EpisodicMemory(..., telemetry=Telemetry(...))``; ``telemetry=True`` is ``Telemetry()``).

    Needs ``pip install 'deepcrew-episodic[otel]'`` (the OpenTelemetry API; your application
    configures the SDK and its exporter).

    Parameters
    ----------
    tracer_provider:
        The ``TracerProvider`` to create spans with; ``None`` (default) uses the global one,
        the one ``opentelemetry.trace.set_tracer_provider`` set, even when it is set after the
        memory is built.
    capture_content:
        Put the query text and the episodes' contents on the spans (redacted, escaped, each text
        cut to *content_chars*). ``None`` (default) follows the conventions' environment variable
        ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` (``true``, ``SPAN_ONLY`` or
        ``SPAN_AND_EVENT`` turn it on), read when the memory is built; off when it is unset.
    content_chars:
        The longest text (a query, a response, a lesson) put on a span with content on.

    Example::

        memory = EpisodicMemory(backend, namespace="support", telemetry=True)
    """

    tracer_provider: Any = None
    capture_content: bool | None = None
    content_chars: int = 1000

    def __post_init__(self) -> None:
        if self.capture_content not in (None, True, False):
            raise ConfigurationError(
                f"capture_content must be True, False or None, not {self.capture_content!r}"
            )
        chars = self.content_chars
        if not isinstance(chars, int) or isinstance(chars, bool) or not 16 <= chars <= 100_000:
            raise ConfigurationError(
                f"content_chars must be an integer from 16 to 100,000, not {chars!r}"
            )


def tracing(
    telemetry: bool | Telemetry | None,
    namespace: str,
    redactor: Redactor | None,
    counters: Counters,
) -> Tracing | None:
    """The memory's tracing for its ``telemetry`` option; ``None`` (nothing imported) when off."""
    if telemetry is None or telemetry is False:
        return None
    if telemetry is True:
        telemetry = Telemetry()
    if not isinstance(telemetry, Telemetry):
        raise ConfigurationError(
            f"telemetry must be True, False or a Telemetry, not {type(telemetry).__name__}"
        )
    return Tracing(telemetry, namespace=namespace, redactor=redactor, counters=counters)


class Tracing:
    """A memory's spans: the tracer, the store id, the content rule."""

    def __init__(
        self,
        config: Telemetry,
        *,
        namespace: str,
        redactor: Redactor | None,
        counters: Counters,
    ) -> None:
        try:
            from opentelemetry import context, trace
        except ImportError:
            raise MissingDependencyError(
                "telemetry needs the OpenTelemetry API: pip install 'deepcrew-episodic[otel]'"
            ) from None
        from . import __version__

        provider = config.tracer_provider
        if provider is not None and not isinstance(provider, trace.TracerProvider):
            raise ConfigurationError(
                f"tracer_provider must be an opentelemetry TracerProvider or None, not "
                f"{type(provider).__name__}"
            )
        self._trace = trace
        self._context = context
        self._counters = counters
        try:
            self._tracer = trace.get_tracer(
                "deepcrew_episodic", __version__, tracer_provider=provider
            )
        except Exception as exc:
            # A broken provider must not stop the memory from being built: no spans, said once.
            self._failed("create the tracer", exc)
            self._tracer = trace.NoOpTracer()
        content = config.capture_content
        if content is None:
            content = os.environ.get(CONTENT_ENV, "").strip().lower() in _CONTENT_ON
        self.content = content
        self._chars = config.content_chars
        # Content leaves the process: redacted even when the memory stores text as given.
        self._redactor = redactor or Redactor()
        self._store = namespace

    # --- the span around one call ---------------------------------------------------------------

    async def run(
        self, op: _Operation, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...], kwargs: Any
    ) -> T:
        arguments = op.arguments(args, kwargs)
        if op.skip is not None and op.skip(arguments):
            return await fn(*args, **kwargs)
        attributes: dict[str, Any] = {
            OPERATION: op.name,
            STORE_ID: self._store,
            FUNCTION: f"deepcrew_episodic.EpisodicMemory.{op.method}",
        }
        attributes.update(self._describe(op, op.before, arguments))
        # The tracing machinery is the application's (its provider, processors, exporters):
        # whatever it raises is logged and counted, and the operation runs, and returns or
        # raises, exactly as without telemetry (a processor failing on a span's end must not
        # turn a stored record into an error the caller would retry).
        try:
            span = self._tracer.start_span(
                op.name, kind=self._trace.SpanKind.INTERNAL, attributes=attributes
            )
            token = self._context.attach(self._trace.set_span_in_context(span))
        except Exception as exc:
            self._failed(f"start a {op.name} span", exc)
            return await fn(*args, **kwargs)
        try:
            result = await fn(*args, **kwargs)
        except BaseException as exc:  # a cancellation ends the operation unfinished too
            self._safely(op, "mark the error on", functools.partial(self._mark, span, exc))
            raise
        else:
            if self._safely(op, "describe", span.is_recording):  # sampled out: nothing built
                described = self._describe(op, op.after, result)
                self._safely(op, "describe", lambda: span.set_attributes(described))
            return result
        finally:
            self._safely(op, "end", lambda: self._end(span, token))

    def _mark(self, span: Any, exc: BaseException) -> None:
        span.set_attribute(ERROR_TYPE, type(exc).__qualname__)
        message = safe_message(self._redactor.redact(str(exc))) if str(exc) else None
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, message))

    def _end(self, span: Any, token: Any) -> None:
        try:
            self._context.detach(token)
        finally:
            span.end()

    def _safely(self, op: _Operation, what: str, step: Callable[[], Any]) -> Any:
        try:
            return step()
        except Exception as exc:
            self._failed(f"{what} a {op.name} span", exc)
            return None

    def _failed(self, what: str, exc: Exception) -> None:
        self._counters.telemetry_failures += 1
        log.warning(
            "telemetry: could not %s (%s); the operation goes on without it",
            what,
            safe_message(f"{type(exc).__name__}: {exc}"),
        )

    def count(self, records: int) -> None:
        """Set the record count on the current span (for a count only the method knows)."""
        try:
            self._trace.get_current_span().set_attribute(RECORD_COUNT, records)
        except Exception as exc:
            self._failed("count the records on a span", exc)

    def _describe(self, op: _Operation, build: _Build, value: Any) -> dict[str, Any]:
        # Describing an operation must never change it: a failure here is logged and counted.
        if build is None:
            return {}
        try:
            return build(self, value)
        except Exception as exc:
            self._counters.telemetry_failures += 1
            log.warning(
                "telemetry: could not describe %s (%s); the span goes without it",
                op.name,
                safe_message(f"{type(exc).__name__}: {exc}"),
            )
            return {}

    # --- attribute values ----------------------------------------------------------------------

    def text(self, value: str, limit: int | None = None) -> str:
        """*value* as it may leave the process: redacted, hidden characters escaped, cut."""
        limit = limit or self._chars
        cleaned = escape_hidden(self._redactor.redact(value))
        return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"

    def record_id(self, value: Any) -> str | None:
        return self.text(value, ID_CHARS) if isinstance(value, str) and value else None

    def records(self, items: list[dict[str, Any]]) -> str:
        # Spans take no structured values yet: the conventions' JSON form, as a string.
        return json.dumps(items, ensure_ascii=False, separators=(",", ":"))

    def episode(self, episode: Any, score: float | None = None) -> dict[str, Any]:
        """One record of the conventions' memory-records schema for *episode*."""
        content: dict[str, Any] = {"query": self.text(episode.query)}
        for name in ("response", "reflection", "approach"):
            value = getattr(episode, name)
            if value:
                content[name] = self.text(value)
        for name in ("tags", "tools_used"):
            values = getattr(episode, name)
            if values:
                content[name] = [self.text(v, ID_CHARS) for v in values]
        metadata: dict[str, Any] = {"outcome": episode.outcome}
        if episode.score is not None:
            metadata["score"] = episode.score
        if episode.timestamp:
            metadata["timestamp"] = self.text(episode.timestamp, ID_CHARS)
        for name in ("agent_id", "run_id"):
            if getattr(episode, name):
                metadata[name] = self.text(getattr(episode, name), ID_CHARS)
        item: dict[str, Any] = {"content": content, "metadata": metadata}
        if episode.id:
            item["id"] = self.text(episode.id, ID_CHARS)
        if score is not None:
            item["score"] = round(float(score), 6)
        return item


# --- what each method's span carries ------------------------------------------------------------

_Build = Callable[[Tracing, Any], dict[str, Any]] | None


@dataclass(frozen=True)
class _Operation:
    name: str  # gen_ai.operation.name, and the span's name
    method: str
    signature: inspect.Signature
    before: _Build = None  # from the call's arguments (by name, defaults applied)
    after: _Build = None  # from the result
    skip: Callable[[Mapping[str, Any]], bool] | None = None

    def arguments(self, args: tuple[Any, ...], kwargs: Any) -> Mapping[str, Any]:
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:
            return {}  # the call itself raises the TypeError, on the span
        bound.apply_defaults()
        return bound.arguments


def _given_id(episode: Any) -> Any:
    return episode.get("id") if isinstance(episode, dict) else getattr(episode, "id", None)


def _record_before(t: Tracing, a: Mapping[str, Any]) -> dict[str, Any]:
    found = t.record_id(_given_id(a.get("episode")))
    return {RECORD_COUNT: 1, **({RECORD_ID: found} if found else {})}


def _record_after(t: Tracing, stored: Any) -> dict[str, Any]:
    out: dict[str, Any] = {RECORD_ID: t.record_id(stored.id) or "", OUTCOME: stored.outcome}
    if t.content:
        out[RECORDS] = t.records([t.episode(stored)])
    return out


def _search_before(t: Tracing, a: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    top_k, intent, query = a.get("top_k"), a.get("intent"), a.get("query")
    if top_k is None:
        top_k = getattr(a.get("self"), "recall_k", None)
    if isinstance(top_k, int) and not isinstance(top_k, bool):
        out[TOP_K] = top_k
    if isinstance(intent, str) and intent in INTENTS:
        out[INTENT] = intent
    if t.content and isinstance(query, str):
        out[QUERY_TEXT] = t.text(query)
    return out


def _search_after(t: Tracing, ranking: Any) -> dict[str, Any]:
    out: dict[str, Any] = {RECORD_COUNT: len(ranking), RANKING: ranking.by}
    if t.content:
        out[RECORDS] = t.records([t.episode(hit.episode, hit.score) for hit in ranking])
    return out


def _grade_before(t: Tracing, a: Mapping[str, Any]) -> dict[str, Any]:
    found = t.record_id(a.get("episode_id"))
    return {RECORD_COUNT: 1, **({RECORD_ID: found} if found else {})}


def _grade_after(t: Tracing, grade: Any) -> dict[str, Any]:
    out: dict[str, Any] = {OUTCOME: grade.outcome, VERIFIED: grade.verified}
    if t.content:
        content: dict[str, Any] = {"outcome": grade.outcome}
        if grade.score is not None:
            content["score"] = grade.score
        if grade.note:
            content["note"] = t.text(grade.note)
        item = {"id": t.record_id(grade.episode_id) or "", "content": content}
        out[RECORDS] = t.records([item])
    return out


def _ids(value: Any) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Collection) and all(isinstance(v, str) for v in value):
        return sorted(set(value))
    return None


def _ids_before(t: Tracing, a: Mapping[str, Any]) -> dict[str, Any]:
    ids = _ids(a.get("ids"))
    out: dict[str, Any] = {}
    if ids is not None and len(ids) == 1 and (found := t.record_id(ids[0])):
        out[RECORD_ID] = found
    return out


def _used_before(t: Tracing, a: Mapping[str, Any]) -> dict[str, Any]:
    ids = _ids(a.get("ids"))
    out = _ids_before(t, a)
    if ids is not None:
        out[RECORD_COUNT] = len(ids)
    return out


def _forget_before(t: Tracing, a: Mapping[str, Any]) -> dict[str, Any]:
    out = _ids_before(t, a)
    containing = a.get("containing")
    if t.content and isinstance(containing, str) and containing:
        out[QUERY_TEXT] = t.text(containing)
    return out


def _deleted_after(t: Tracing, deleted: Any) -> dict[str, Any]:
    return {RECORD_COUNT: deleted} if isinstance(deleted, int) else {}


_SPECS: dict[str, tuple[str, _Build, _Build]] = {
    "record": ("create_memory", _record_before, _record_after),
    "explain": ("search_memory", _search_before, _search_after),
    "grade": ("update_memory", _grade_before, _grade_after),
    "used": ("update_memory", _used_before, None),
    "forget": ("delete_memory", _forget_before, _deleted_after),
    "sweep": ("delete_memory", None, None),  # the count of expired records: Tracing.count
    "shrink": ("delete_memory", None, _deleted_after),
    "clear": ("delete_memory", None, None),  # no record id: every record of the store
}


def _dry_run(arguments: Mapping[str, Any]) -> bool:
    return arguments.get("dry_run") is True  # deletes nothing: no delete_memory span


def traced(method: str) -> Callable[[F], F]:
    """Decorate the :class:`EpisodicMemory` method *method* with its span (see the table
    above). A memory without telemetry calls the method straight through."""
    name, before, after = _SPECS[method]

    def decorate(fn: F) -> F:
        op = _Operation(
            name,
            method,
            inspect.signature(fn),
            before,
            after,
            _dry_run if method in ("forget", "sweep") else None,
        )

        @functools.wraps(fn)
        async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            spans: Tracing | None = self._telemetry
            if spans is None:
                return await fn(self, *args, **kwargs)
            return await spans.run(op, fn, (self, *args), kwargs)

        return cast(F, wrapper)

    return decorate
