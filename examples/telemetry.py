"""OpenTelemetry spans for the memory, offline:

- each record, recall, grade and forget is one span of the GenAI memory conventions
  (``create_memory``, ``search_memory``, ``update_memory``, ``delete_memory``), a child of the
  application's own span;
- without an opt-in no span carries a query or an episode's text;
- with ``capture_content=True`` they do, with secrets redacted and control characters escaped.

The spans go to the SDK's in-memory exporter and are printed; in an application you would
configure an OTLP exporter instead (see docs/telemetry.md).

    pip install 'deepcrew-episodic[otel]' opentelemetry-sdk
    python examples/telemetry.py
"""

from __future__ import annotations

import json

import anyio
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from deepcrew_episodic import Episode, EpisodicMemory, Telemetry
from deepcrew_episodic.providers import InMemoryProvider

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
app = provider.get_tracer("support-bot")


def show(spans: tuple[ReadableSpan, ...]) -> None:
    ids = {span.context.span_id: span.name for span in spans}
    for span in spans:
        parent = ids.get(span.parent.span_id, "?") if span.parent else "-"
        duration_ms = ((span.end_time or 0) - (span.start_time or 0)) / 1e6
        print(f"{span.name} (kind {span.kind.name}, parent {parent}, {duration_ms:.2f} ms)")
        for key, value in sorted((span.attributes or {}).items()):
            print(f"    {key} = {value!r}")
        if span.status.status_code.name == "ERROR":
            print(f"    status = ERROR: {span.status.description}")


async def main() -> None:
    memory = EpisodicMemory(
        InMemoryProvider(),
        namespace="support",
        telemetry=Telemetry(tracer_provider=provider),
    )
    with app.start_as_current_span("handle ticket"):
        stored = await memory.record(
            Episode(
                query="Rotate the billing key AKIAIOSFODNN7EXAMPLE \x1b[2J",
                response="Created a second key, then revoked the first.",
                outcome="success",
            )
        )
        await memory.recall("how do I rotate the billing key?")
        await memory.grade(stored.id, outcome="success", note="the user confirmed")
        try:
            await memory.grade("no-such-run", outcome="failure")
        except Exception as exc:
            print(f"the caller still gets the error: {type(exc).__name__}")
        await memory.forget(stored.id)
    print("== without opt-in ==")
    show(exporter.get_finished_spans())
    exporter.clear()

    curious = EpisodicMemory(
        InMemoryProvider(),
        namespace="support",
        telemetry=Telemetry(tracer_provider=provider, capture_content=True),
    )
    await curious.record(
        Episode(query="Rotate the billing key AKIAIOSFODNN7EXAMPLE \x1b[2J", outcome="success")
    )
    await curious.recall("rotate the billing key")
    print("== with capture_content=True ==")
    for span in exporter.get_finished_spans():
        attributes = span.attributes or {}
        print(span.name, "query text:", attributes.get("gen_ai.memory.query.text"))
        for record in json.loads(str(attributes["gen_ai.memory.records"])):
            print("    record:", json.dumps(record["content"], ensure_ascii=False))


anyio.run(main)
