// The TypeScript SDK clients against a modelctx server (the facade's test server binary, given
// as the first argument, serving its richer `--client-tests` server): `@modelcontextprotocol/sdk`
// 1.x over Streamable HTTP and stdio; `@modelcontextprotocol/client` 2.x over Streamable HTTP in
// the legacy era, in its automatic mode and pinned to 2026-07-28, and over stdio in the legacy
// era and pinned to 2026-07-28. Each lists every page of tools, resources, resource templates
// and prompts, and exercises a call, progress, logging, structured output, reads (a template's
// too), a prompt and completion, elicitation, sampling and roots. Prints one JSON line per
// client: {"client", "ok", "detail"}; exits 0 when every client passed.

import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';

import { Client as Client2, LOG_LEVEL_META_KEY, StreamableHTTPClientTransport as Http2 } from '@modelcontextprotocol/client';
import { StdioClientTransport as Stdio2 } from '@modelcontextprotocol/client/stdio';
import { Client as Client1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport as Stdio1 } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport as Http1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
    CreateMessageRequestSchema,
    ElicitRequestSchema,
    ListRootsRequestSchema,
    LoggingMessageNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';

const bin = process.argv[2];
const args = ['--client-tests'];
const server = spawn(bin, [...args, '--http'], { stdio: ['pipe', 'pipe', 'inherit'] });
const first = await new Promise((resolve) => createInterface({ input: server.stdout }).once('line', resolve));
const url = new URL(`http://127.0.0.1:${first.split(' ')[1]}/mcp`);

// What the client answers the server with: its requests in the legacy era; in the 2026-07-28 era
// the `input_required` results of `tools/call`, which 2.x fulfils with the same handlers.
const capabilities = { elicitation: {}, sampling: {}, roots: {} };
const handlers = {
    elicit: async () => ({ action: 'accept', content: { answer: 'yes' } }),
    sample: async () => ({ role: 'assistant', model: 'test-model', content: { type: 'text', text: 'hello' } }),
    roots: async () => ({ roots: [{ uri: 'file:///work', name: 'work' }] }),
};

const expect = (what, got, want) => {
    if (JSON.stringify(got) !== JSON.stringify(want)) {
        throw new Error(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
    }
};

// Every item of a paginated list, following `nextCursor` until there is none (the server
// serves two items a page). 2.x walks the pages itself when called without a cursor, so there
// the first call already answers everything.
async function listAll(list, key) {
    const items = [];
    let cursor;
    do {
        const page = await list(cursor === undefined ? undefined : { cursor });
        items.push(...page[key]);
        cursor = page.nextCursor;
    } while (cursor !== undefined);
    return items;
}

// One client's run. `options`:
// - `progress(onprogress)`: the request options that ask for progress;
// - `stdio`: both SDKs (1.x and 2.x alike) handle a response at once but notifications a
//   microtask later, and forget the progress handler with the response: progress read in the same
//   chunk as the response comes too late and is reported to `onerror` as "for an unknown token"
//   (stdio delivers all lines of `steps` in one read). So over HTTP, where each comes as its own
//   SSE event, both progress notifications must reach the handler; over stdio each must either
//   reach it or be reported late;
// - `era`: 'legacy' or 'modern', the era the client must end up in (2.x says which it did;
//   1.x only knows the legacy one);
// - `onLog(handler)`: registers the handler of `notifications/message`.
// Logging: in the legacy era the client sets the level with `logging/setLevel`. The 2026-07-28
// era has no such method: a request asks for log messages with `io.modelcontextprotocol/logLevel`
// in its `_meta`. 2.x exports that key (`LOG_LEVEL_META_KEY`) but has no option that sets it (its
// per-request `_meta` envelope leaves the level out), so the call passes it in its own `_meta`,
// which 2.x merges over the envelope.
async function exercise(name, client, transport, options) {
    // What the client reports to `onerror`: late progress (see `stdio`), else nothing.
    const errors = [];
    let late = 0;
    client.onerror = (e) => {
        if (/progress notification for an unknown token/.test(e.message)) {
            late++;
        } else {
            errors.push(e.message);
        }
    };
    // The messages the client is still sending. Over HTTP its answer to the server's last request
    // (roots) is a POST whose 202 may come after the tool's result, on another connection: closing
    // then would abort that POST ("This operation was aborted"). So the run waits for every send to
    // settle before it closes; a send that fails is still reported to `onerror`.
    const sending = new Set();
    const send = transport.send.bind(transport);
    transport.send = (...message) => {
        const sent = send(...message);
        sending.add(sent);
        const settled = () => sending.delete(sent);
        sent.then(settled, settled);
        return sent;
    };
    try {
        await client.connect(transport);
        const era = options.era;
        if (client.getProtocolEra) {
            expect('era', client.getProtocolEra(), era);
        }
        const tools = await listAll((p) => client.listTools(p), 'tools');
        expect(
            'tools',
            tools.map((t) => t.name),
            ['add', 'ask', 'crash', 'echo', 'form', 'roots', 'sample', 'steps', 'touch', 'wait'],
        );
        const echo = await client.callTool({ name: 'echo', arguments: { text: 'hi' } });
        expect('echo', echo.content[0].text, 'hi');

        const logs = [];
        options.onLog((n) => n.params.logger === 'steps' && logs.push(n.params.data));
        let meta;
        if (era === 'legacy') {
            await client.setLoggingLevel('info');
        } else {
            meta = { [LOG_LEVEL_META_KEY]: 'info' };
        }
        let progress = 0;
        const steps = await client.callTool(
            { name: 'steps', arguments: { count: 2 }, _meta: meta },
            ...options.progress(() => progress++),
        );
        expect('steps', steps.structuredContent, { steps: 2 });
        await new Promise(setImmediate); // notifications are handled a microtask later
        expect('progress', options.stdio ? progress + late : progress, 2);
        expect('log messages', logs, [{ step: 1 }, { step: 2 }]);

        const add = await client.callTool({ name: 'add', arguments: { a: 2, b: 3 } });
        expect('add', add.structuredContent, { sum: 5 });

        const resources = await listAll((p) => client.listResources(p), 'resources');
        expect(
            'resources',
            resources.map((r) => r.uri),
            ['file:///changes.md', 'file:///license.md', 'file:///readme.md'],
        );
        const templates = await listAll((p) => client.listResourceTemplates(p), 'resourceTemplates');
        expect('templates', templates.map((t) => t.uriTemplate), ['file:///notes/{name}']);
        const read = await client.readResource({ uri: 'file:///readme.md' });
        expect('read', read.contents[0].text, '# facade');
        const note = await client.readResource({ uri: 'file:///notes/alpha' });
        expect('template read', note.contents[0].text, 'note alpha');

        const prompts = await listAll((p) => client.listPrompts(p), 'prompts');
        expect('prompts', prompts.map((p) => p.name), ['greet']);
        const prompt = await client.getPrompt({ name: 'greet', arguments: { name: 'Ada' } });
        expect('prompt', prompt.messages[0].content.text, 'Say hello to Ada');
        const completion = await client.complete({
            ref: { type: 'ref/prompt', name: 'greet' },
            argument: { name: 'name', value: 'A' },
        });
        expect('completion', completion.completion.values, ['Ada', 'Alan']);
        const noteCompletion = await client.complete({
            ref: { type: 'ref/resource', uri: 'file:///notes/{name}' },
            argument: { name: 'name', value: 'a' },
        });
        expect('template completion', noteCompletion.completion.values, ['alpha']);

        const ask = await client.callTool({ name: 'ask', arguments: {} });
        expect('ask', ask.content[0].text, 'answered yes');
        const sample = await client.callTool({ name: 'sample', arguments: { text: 'hi' } });
        expect('sample', sample.content[0].text, 'test-model said hello');
        const roots = await client.callTool({ name: 'roots', arguments: {} });
        expect('roots', roots.content[0].text, 'file:///work');

        await Promise.allSettled([...sending]);
        await client.close();
        expect('errors', errors, []);
        return { client: name, ok: true, detail: `era ${era}` };
    } catch (error) {
        await client.close().catch(() => {});
        const reported = errors.length > 0 ? `\nreported to onerror: ${errors.join('; ')}` : '';
        return { client: name, ok: false, detail: String(error?.stack ?? error) + reported };
    }
}

const results = [];

for (const [transport, make] of [
    ['HTTP', () => new Http1(url)],
    ['stdio', () => new Stdio1({ command: bin, args })],
]) {
    const client = new Client1({ name: 'sdk-1', version: '1' }, { capabilities });
    client.setRequestHandler(ElicitRequestSchema, handlers.elicit);
    client.setRequestHandler(CreateMessageRequestSchema, handlers.sample);
    client.setRequestHandler(ListRootsRequestSchema, handlers.roots);
    results.push(
        await exercise(`sdk 1.x, ${transport}`, client, make(), {
            progress: (onprogress) => [undefined, { onprogress }],
            stdio: transport === 'stdio',
            era: 'legacy',
            onLog: (handler) => client.setNotificationHandler(LoggingMessageNotificationSchema, handler),
        }),
    );
}

// 'auto' probes with `server/discover`, which our server answers: the modern era.
const pinned = { pin: '2026-07-28' };
for (const [transport, mode, make] of [
    ['HTTP', 'legacy', () => new Http2(url)],
    ['HTTP', 'auto', () => new Http2(url)],
    ['HTTP', pinned, () => new Http2(url)],
    ['stdio', 'legacy', () => new Stdio2({ command: bin, args })],
    ['stdio', pinned, () => new Stdio2({ command: bin, args })],
]) {
    const client = new Client2({ name: 'client-2', version: '2' }, { capabilities, versionNegotiation: { mode } });
    client.setRequestHandler('elicitation/create', handlers.elicit);
    client.setRequestHandler('sampling/createMessage', handlers.sample);
    client.setRequestHandler('roots/list', handlers.roots);
    results.push(
        await exercise(`client 2.x ${JSON.stringify(mode)}, ${transport}`, client, make(), {
            progress: (onprogress) => [{ onprogress }],
            stdio: transport === 'stdio',
            era: mode === 'legacy' ? 'legacy' : 'modern',
            onLog: (handler) => client.setNotificationHandler('notifications/message', handler),
        }),
    );
}

server.stdin.end();
for (const result of results) {
    console.log(JSON.stringify(result));
}
process.exit(results.every((r) => r.ok) ? 0 : 1);
