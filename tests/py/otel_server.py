"""The Python SDK's server over stdio, traced (its built-in OpenTelemetry middleware):
`otel_server.py SPANS` serves the tool `echo` until stdin closes, then writes its spans as JSON to
the file SPANS."""

from __future__ import annotations

import sys

import otel_common

from mcp.server.mcpserver import MCPServer

server = MCPServer("py-otel")


@server.tool()
def echo(text: str) -> str:
    """Says the text back."""
    return text


if __name__ == "__main__":
    otel_common.install()
    try:
        server.run("stdio")
    finally:
        otel_common.dump(sys.argv[1])
