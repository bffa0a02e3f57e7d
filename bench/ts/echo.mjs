// The TypeScript SDK's (v1, `@modelcontextprotocol/sdk`) echo server of the benchmarks: the
// tool `echo` ({"text": string} in, the text back), registered the SDK's usual way (McpServer,
// a zod input schema).
//
//   node echo.mjs stdio                 stdin/stdout
//   node echo.mjs http [json|sse]       Streamable HTTP on /mcp, one transport per legacy
//                                       session (JSON responses, or SSE: the SDK's default)
//   node echo.mjs http stateless        no sessions, a server and transport per request (the
//                                       SDK's stateless example), JSON responses
//
// The HTTP server listens on 127.0.0.1 (a port the system picks), prints `LISTENING <port>`,
// and sets TCP_NODELAY on every connection.

import { createServer } from "node:http";
import { randomUUID } from "node:crypto";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { isInitializeRequest } from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";

function echoServer() {
  const server = new McpServer({ name: "ts-bench", version: "0.0.0" });
  server.registerTool(
    "echo",
    { description: "Says the text back", inputSchema: { text: z.string() } },
    async ({ text }) => ({ content: [{ type: "text", text }] }),
  );
  return server;
}

const [mode = "stdio", variant = "json"] = process.argv.slice(2);

if (mode === "stdio") {
  await echoServer().connect(new StdioServerTransport());
} else {
  const sessions = new Map();
  const http = createServer(async (req, res) => {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString("utf8")) : undefined;
    try {
      if (variant === "stateless") {
        const server = echoServer();
        const transport = new StreamableHTTPServerTransport({
          sessionIdGenerator: undefined,
          enableJsonResponse: true,
        });
        res.on("close", () => {
          transport.close();
          server.close();
        });
        await server.connect(transport);
        await transport.handleRequest(req, res, body);
        return;
      }
      const id = req.headers["mcp-session-id"];
      let transport = id ? sessions.get(id) : undefined;
      if (!transport && req.method === "POST" && isInitializeRequest(body)) {
        transport = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          enableJsonResponse: variant !== "sse",
          onsessioninitialized: (sid) => sessions.set(sid, transport),
        });
        transport.onclose = () => {
          if (transport.sessionId) sessions.delete(transport.sessionId);
        };
        await echoServer().connect(transport);
      }
      if (!transport) {
        res.writeHead(id ? 404 : 400).end();
        return;
      }
      await transport.handleRequest(req, res, body);
    } catch (error) {
      if (!res.headersSent) res.writeHead(500).end(String(error));
    }
  });
  http.on("connection", (socket) => socket.setNoDelay(true));
  http.listen(0, "127.0.0.1", () => {
    process.stdout.write(`LISTENING ${http.address().port}\n`);
  });
}
