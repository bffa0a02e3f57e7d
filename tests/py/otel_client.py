"""The Python SDK's client, traced: `otel_client.py URL MODE` calls the tool `echo` of the
Streamable HTTP server at URL inside a span "host" (MODE: "legacy" for the initialize handshake,
"auto" for the 2026-07-28 probe), and prints its spans as JSON on stdout."""

from __future__ import annotations

import json
import sys

import anyio
import otel_common
from opentelemetry import trace

from mcp import Client


async def main(url: str, mode: str) -> None:
    otel_common.install()
    tracer = trace.get_tracer("otel-interop")
    async with Client(url, mode=mode, cache=None) as client:
        with tracer.start_as_current_span("host"):
            result = await client.call_tool("echo", {"text": "traced"})
        if result.is_error:
            raise SystemExit(f"the call failed: {result}")
        version = client.protocol_version
    print(json.dumps({"protocol_version": version, "spans": otel_common.spans()}))


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
