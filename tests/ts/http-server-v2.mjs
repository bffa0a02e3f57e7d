// A Streamable HTTP MCP server on the TypeScript SDK 2.x (`@modelcontextprotocol/server` with the
// `@modelcontextprotocol/node` adapter), for the Rust HTTP client's tests: a real peer that serves
// both eras on one endpoint, http://127.0.0.1:<port>/mcp.
//
// The modern era (2026-07-28: `server/discover`, every request carrying its `_meta` envelope, no
// session) is served by the SDK's `createMcpHandler`, a fresh server instance per request;
// responses are one JSON body unless the handler sends something before its result (progress),
// which upgrades the response to SSE (the SDK's default `responseMode: 'auto'`).
//
// The 2025 era (the `initialize` handshake), chosen by `--legacy=<mode>`:
//   stateless  (default) the SDK's own fallback in createMcpHandler: each legacy request gets a
//              fresh instance and a transport with no sessions, so no Mcp-Session-Id is issued
//              and GET and DELETE are answered 405;
//   sessions   the SDK's documented composition (`isLegacyRequest` in front of a
//              `legacy: 'reject'` handler): legacy requests go to a sessionful
//              WebStandardStreamableHTTPServerTransport, one per session (randomUUID ids, SSE
//              responses), routed as the 1.x server (http-server-v1.mjs) does (a body that is
//              not JSON, without a session: 400 -32700). Note: the Node adapter (toNodeHandler)
//              sends a response's headers with its first body bytes, so the headers of a GET
//              stream arrive only with its first event or keep-alive comment (15 s);
//   reject     modern only: legacy requests are answered with the unsupported-protocol-version
//              error.
//
// Tools: echo {text} -> the text; progress {steps} -> `steps` progress notifications when the
// request has a progressToken, then "done"; slow {ms} -> waits ms (less if cancelled), then "slept".
//
// Listens on 127.0.0.1, a free port; prints one line `LISTENING <port>` on stdout once ready;
// exits when its standard input closes. Its other stdout lines tell the test what the slow tool's
// handler does, so the test can wait for it rather than sleep: `HOLDING slow` once it holds a
// call, `CANCELLED slow` when that call is cancelled (nothing else goes to stdout).
//
// Usage: node http-server-v2.mjs [--legacy=stateless|sessions|reject]

import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';

import { localhostHostValidation, localhostOriginValidation, toNodeHandler } from '@modelcontextprotocol/node';
import {
    createMcpHandler,
    isLegacyRequest,
    McpServer,
    WebStandardStreamableHTTPServerTransport,
} from '@modelcontextprotocol/server';
import { z } from 'zod';

// stdout carries the LISTENING line and the slow tool's lines only.
console.log = console.error;
console.info = console.error;
const say = (line) => process.stdout.write(`${line}\n`);

const LEGACY_MODES = ['stateless', 'sessions', 'reject'];
let legacy = 'stateless';
for (const arg of process.argv.slice(2)) {
    const mode = arg.startsWith('--legacy=') ? arg.slice('--legacy='.length) : undefined;
    if (!LEGACY_MODES.includes(mode)) {
        console.error(`usage: node http-server-v2.mjs [--legacy=${LEGACY_MODES.join('|')}]`);
        process.exit(2);
    }
    legacy = mode;
}

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

/** One server instance: the same tools for both eras. */
function newServer() {
    const server = new McpServer({ name: 'modelctx-test-v2', version: '2.0.0' });
    server.registerTool(
        'echo',
        { description: 'Returns its text', inputSchema: z.object({ text: z.string() }) },
        async ({ text: value }) => text(value),
    );
    server.registerTool(
        'progress',
        {
            description: 'Sends `steps` progress notifications (when asked for progress), then returns "done"',
            inputSchema: z.object({ steps: z.number().int().min(0) }),
        },
        async ({ steps }, ctx) => {
            const progressToken = ctx.mcpReq._meta?.progressToken;
            if (progressToken !== undefined) {
                for (let i = 1; i <= steps; i++) {
                    await ctx.mcpReq.notify({
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
            inputSchema: z.object({ ms: z.number().int().min(0) }),
        },
        async ({ ms }, ctx) => {
            say('HOLDING slow');
            await sleep(ms, ctx.mcpReq.signal);
            if (ctx.mcpReq.signal.aborted) say('CANCELLED slow');
            return text('slept');
        },
    );
    return server;
}

const onerror = (error) => console.error('mcp:', error);

const jsonRpcError = (status, code, message) =>
    Response.json({ jsonrpc: '2.0', error: { code, message }, id: null }, { status });

/** `--legacy=sessions`: the 2025 era on sessionful transports. session id -> transport. */
const transports = new Map();

async function sessionfulLegacy(request) {
    const sessionId = request.headers.get('mcp-session-id');
    const existing = sessionId ? transports.get(sessionId) : undefined;
    if (existing) return existing.handleRequest(request);
    if (sessionId) return jsonRpcError(404, -32001, 'Session not found');
    if (request.method !== 'POST') return new Response('Missing session ID', { status: 400 });
    let body;
    try {
        body = await request.clone().json();
    } catch {
        return jsonRpcError(400, -32700, 'Parse error: Invalid JSON');
    }
    if (body?.method !== 'initialize') {
        return jsonRpcError(400, -32000, 'Bad Request: No valid session ID provided');
    }
    const transport = new WebStandardStreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (id) => {
            transports.set(id, transport);
        },
    });
    transport.onclose = () => {
        if (transport.sessionId) transports.delete(transport.sessionId);
    };
    await newServer().connect(transport);
    return transport.handleRequest(request);
}

let fetchHandler;
if (legacy === 'sessions') {
    const modern = createMcpHandler(newServer, { legacy: 'reject', onerror });
    fetchHandler = {
        fetch: async (request, options) =>
            (await isLegacyRequest(request)) ? sessionfulLegacy(request) : modern.fetch(request, options),
    };
} else {
    fetchHandler = createMcpHandler(newServer, { legacy, onerror });
}
const nodeHandler = toNodeHandler(fetchHandler);

const validateHost = localhostHostValidation();
const validateOrigin = localhostOriginValidation();

const httpServer = createServer(async (req, res) => {
    if (!validateHost(req, res) || !validateOrigin(req, res)) return;
    if (new URL(req.url ?? '/', 'http://localhost').pathname !== '/mcp') {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('Not Found');
        return;
    }
    await nodeHandler(req, res);
});

httpServer.listen(0, '127.0.0.1', () => {
    process.stdout.write(`LISTENING ${httpServer.address().port}\n`);
});
httpServer.on('error', (error) => {
    console.error('cannot listen:', error);
    process.exit(1);
});

// The test that spawned this server drops its standard input to stop it.
process.stdin.on('end', () => process.exit(0));
process.stdin.on('close', () => process.exit(0));
process.stdin.resume();
