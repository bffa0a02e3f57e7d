"""Shared by the OpenTelemetry interop scripts: an SDK tracer provider with an in-memory exporter
(the W3C propagator is the API's default), and its spans as JSON."""

from __future__ import annotations

import json
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

EXPORTER = InMemorySpanExporter()


def install() -> None:
    """Makes the SDK provider the global one, exporting to `EXPORTER`."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(provider)


def spans() -> list[dict[str, Any]]:
    """The finished spans: name, kind, ids in hex, the parent's span id, attributes."""
    out = []
    for span in EXPORTER.get_finished_spans():
        context = span.get_span_context()
        out.append(
            {
                "name": span.name,
                "kind": span.kind.name.lower(),
                "trace_id": format(context.trace_id, "032x"),
                "span_id": format(context.span_id, "016x"),
                "parent_span_id": format(span.parent.span_id, "016x") if span.parent else None,
                "parent_is_remote": bool(span.parent and span.parent.is_remote),
                "attributes": {k: str(v) for k, v in (span.attributes or {}).items()},
            }
        )
    return out


def dump(path: str) -> None:
    """Writes `spans()` to `path` as JSON."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(spans(), f)
