// A Streamable HTTP MCP server on the TypeScript SDK 1.x (`@modelcontextprotocol/sdk`), for the
// Rust HTTP client's tests: a real peer of the 2025 era.
//
// Stateful, as the SDK's own example (`simpleStreamableHttp`) is wired: one
// StreamableHTTPServerTransport and one McpServer per session, session ids from randomUUID(),
// SSE responses (JSON responses off, the default), on the SDK's express app. Requests are routed
// exactly as that example does:
//   - POST without Mcp-Session-Id: an `initialize` opens a session; anything else is answered
//     400 {"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}
//   - any request with an unknown Mcp-Session-Id: 404 {"jsonrpc":"2.0","error":{"code":-32001,"message":"Session not found"},"id":null}
//   - GET or DELETE without Mcp-Session-Id: 400 text/html "Missing session ID"
//
// Tools: echo {text} -> the text; progress {steps} -> `steps` progress notifications when the
// request has a progressToken, then "done"; slow {ms} -> waits ms (less if cancelled), then "slept".
//
// Listens on 127.0.0.1, a free port; prints one line `LISTENING <port>` on stdout once ready;
// exits when its standard input closes. Its other stdout lines tell the test what the slow tool's
// handler does, so the test can wait for it rather than sleep: `HOLDING slow` once it holds a
// call, `CANCELLED slow` when that call is cancelled (nothing else goes to stdout).
//
// Usage: node http-server-v1.mjs

import { randomUUID } from 'node:crypto';

import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

// stdout carries the LISTENING line and the slow tool's lines only.
console.log = console.error;
console.info = console.error;
const say = (line) => process.stdout.write(`${line}\n`);

const text = (value) => ({ content: [{ type: 'text', text: value }] });

/** Waits `ms` milliseconds, or less if `signal` aborts. */
const sleep = (ms, signal) =>
    new Promise((resolve) => {
        if (signal?.aborted) {
            resolve();
            return;
        }
        const timer = setTimeout(resolve, ms);
        signal?.addEventListener('abort', () => {
            clearTimeout(timer);
            resolve();
        });
    });

function newServer() {
    const server = new McpServer({ name: 'modelctx-test-v1', version: '1.0.0' });
    server.registerTool(
        'echo',
        { description: 'Returns its text', inputSchema: { text: z.string() } },
        async ({ text: value }) => text(value),
    );
    server.registerTool(
        'progress',
        {
            description: 'Sends `steps` progress notifications (when asked for progress), then returns "done"',
            inputSchema: { steps: z.number().int().min(0) },
        },
        async ({ steps }, extra) => {
            const progressToken = extra._meta?.progressToken;
            if (progressToken !== undefined) {
                for (let i = 1; i <= steps; i++) {
                    await extra.sendNotification({
                        method: 'notifications/progress',
                        params: { progressToken, progress: i, total: steps, message: `step ${i}/${steps}` },
                    });
                }
            }
            return text('done');
        },
    );
    server.registerTool(
        'slow',
        {
            description: 'Waits `ms` milliseconds, then returns "slept"',
            inputSchema: { ms: z.number().int().min(0) },
        },
        async ({ ms }, extra) => {
            say('HOLDING slow');
            await sleep(ms, extra.signal);
            if (extra.signal.aborted) say('CANCELLED slow');
            return text('slept');
        },
    );
    return server;
}

/** The open sessions: session id -> transport. */
const transports = new Map();

const jsonRpcError = (res, status, code, message) =>
    res.status(status).json({ jsonrpc: '2.0', error: { code, message }, id: null });

const app = createMcpExpressApp({ host: '127.0.0.1' });

app.post('/mcp', async (req, res) => {
    const sessionId = req.headers['mcp-session-id'];
    try {
        const existing = sessionId ? transports.get(sessionId) : undefined;
        if (existing) {
            await existing.handleRequest(req, res, req.body);
            return;
        }
        if (sessionId) {
            jsonRpcError(res, 404, -32001, 'Session not found');
            return;
        }
        if (!isInitializeRequest(req.body)) {
            jsonRpcError(res, 400, -32000, 'Bad Request: No valid session ID provided');
            return;
        }
        const transport = new StreamableHTTPServerTransport({
            sessionIdGenerator: () => randomUUID(),
            onsessioninitialized: (id) => {
                transports.set(id, transport);
            },
        });
        transport.onclose = () => {
            if (transport.sessionId) transports.delete(transport.sessionId);
        };
        await newServer().connect(transport);
        await transport.handleRequest(req, res, req.body);
    } catch (error) {
        console.error('error handling POST /mcp:', error);
        if (!res.headersSent) jsonRpcError(res, 500, -32603, 'Internal server error');
    }
});

// GET (the standalone SSE stream) and DELETE (the end of a session) need a session.
const sessionRequest = async (req, res) => {
    const sessionId = req.headers['mcp-session-id'];
    if (!sessionId) {
        res.status(400).send('Missing session ID');
        return;
    }
    const transport = transports.get(sessionId);
    if (!transport) {
        jsonRpcError(res, 404, -32001, 'Session not found');
        return;
    }
    try {
        await transport.handleRequest(req, res);
    } catch (error) {
        console.error(`error handling ${req.method} /mcp:`, error);
        if (!res.headersSent) jsonRpcError(res, 500, -32603, 'Internal server error');
    }
};
app.get('/mcp', sessionRequest);
app.delete('/mcp', sessionRequest);

const httpServer = app.listen(0, '127.0.0.1', (error) => {
    if (error) {
        console.error('cannot listen:', error);
        process.exit(1);
    }
    process.stdout.write(`LISTENING ${httpServer.address().port}\n`);
});

// The test that spawned this server drops its standard input to stop it.
process.stdin.on('end', () => process.exit(0));
process.stdin.on('close', () => process.exit(0));
process.stdin.resume();
