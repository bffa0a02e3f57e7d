// The TypeScript SDK clients against a fleet: three `mcx serve demo --http --redis` instances
// behind nginx round-robin (started by `tests/tests/it/fleet_ts.rs`, which runs this script).
//
//   node fleet-clients.mjs legacy URL   @modelcontextprotocol/sdk 1.x, StreamableHTTPClientTransport
//   node fleet-clients.mjs resume URL   the same, a call resumed after its instance was killed
//   node fleet-clients.mjs redis URL    both, while Redis is killed and restarted
//   node fleet-clients.mjs modern URL   @modelcontextprotocol/client 2.x pinned to 2026-07-28
//
// The script and the Rust test take turns. The script runs a step, prints one JSON line
// `{"step": NAME, ...}` on stdout, and waits for a line on stdin: `next` (go on to the next
// step) or `expect N` (wait, at most 15 s, until N `notifications/tools/list_changed` have
// arrived, and print `{"step": "notified", ...}`). Meanwhile the test reads nginx's access log
// (which instance served which request) and acts on chosen instances itself. A failure prints
// `{"step": "failed", "detail": ...}` and exits 1; stdin closed (the test ended) exits 2.
//
// A recording `fetch` (the transports' `fetch` option) counts the requests by HTTP method and
// JSON-RPC method, and counts the list_changed notifications by the stream that carried them: `GET`
// for the legacy standalone stream, the JSON-RPC method of the POST otherwise (the modern listen
// stream is the POST of `subscriptions/listen`). It changes nothing on the wire.
//
// Legacy steps: connected (initialize, initialized, the GET stream open), calls (tools/list and
// 36 echo calls: 24 one after another, 12 at once), sampling (`haiku`, whose
// `sampling/createMessage` the client's handler answers), listening (the GET stream waits for
// list changes the test causes), deleted (DELETE, then the client closed; the script exits).
// Resume steps: connected, running (`countdown` has sent 3 progress notifications, and the
// client missed 2 more; the test kills its instance), resumed (the call failed with the error for a lost call; the progress
// seen, each once). Redis steps: connected (the test kills Redis), refused (the legacy calls
// refused, the modern ones answered; the test restarts Redis), served. Modern steps: connected, calls (36 echo calls), confirm (`confirm`: an elicitation answered
// through `input_required` and the retry), listening (a `subscriptions/listen` stream), done
// (the subscription and the client closed; the script exits).

import { createInterface } from 'node:readline';

import { Client as Client2, StreamableHTTPClientTransport as Http2 } from '@modelcontextprotocol/client';
import { Client as Client1 } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport as Http1 } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CreateMessageRequestSchema, ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

const [mode, address] = process.argv.slice(2);
const url = new URL(address);
const LIST_CHANGED = 'notifications/tools/list_changed';
const WAIT_MS = 15_000;

const say = (step, fields = {}) => console.log(JSON.stringify({ step, ...fields }));

const stdin = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
async function command() {
    const { value, done } = await stdin.next();
    if (done) {
        process.exit(2);
    }
    return value.trim();
}
async function next() {
    const line = await command();
    if (line !== 'next') {
        throw new Error(`expected "next" on stdin, got ${JSON.stringify(line)}`);
    }
}

const expect = (what, got, want) => {
    if (JSON.stringify(got) !== JSON.stringify(want)) {
        throw new Error(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
    }
};

// Resolves when `check()` holds, rejects after `ms`; re-checked by `poke()`.
const waiters = new Set();
function until(what, check, ms = WAIT_MS) {
    if (check()) {
        return Promise.resolve();
    }
    return new Promise((resolve, reject) => {
        const waiter = () => {
            if (check()) {
                clearTimeout(timer);
                waiters.delete(waiter);
                resolve();
            }
        };
        const timer = setTimeout(() => {
            waiters.delete(waiter);
            reject(new Error(`${what}: not within ${ms} ms`));
        }, ms);
        waiters.add(waiter);
    });
}
const poke = () => [...waiters].forEach((waiter) => waiter());

// What went over the wire, as the recording fetch saw it.
const record = {
    // `POST <json-rpc method or "response"/"notification">`, `GET`, `DELETE` -> count.
    requests: {},
    // The statuses of the GET requests, in order.
    gets: [],
    // The statuses of the GET requests that resumed a stream (with `Last-Event-ID`), in order.
    resumes: [],
    // List changes counted in the SSE streams, by the stream that carried them.
    listChangedOn: {},
    // Whether the chunks of `tools/call` streams are dropped (see `holdable`), and how many
    // progress notifications were dropped.
    holding: false,
    dropped: 0,
};

// What a POST body is: its JSON-RPC method, or `response`.
function kindOf(body) {
    try {
        const message = JSON.parse(body);
        return message.method ?? 'response';
    } catch {
        return 'unreadable';
    }
}

// Counts `LIST_CHANGED` in an SSE body as it streams through, for `stream`.
function tap(body, stream) {
    let text = '';
    const decoder = new TextDecoder();
    return body.pipeThrough(
        new TransformStream({
            transform(chunk, controller) {
                text += decoder.decode(chunk, { stream: true });
                let at;
                while ((at = text.indexOf(LIST_CHANGED)) !== -1) {
                    record.listChangedOn[stream] = (record.listChangedOn[stream] ?? 0) + 1;
                    text = text.slice(at + LIST_CHANGED.length);
                }
                text = text.slice(-(LIST_CHANGED.length - 1));
                controller.enqueue(chunk);
            },
        }),
    );
}

// While `record.holding` is set, drops the chunks of an SSE body instead of passing them on
// (the client misses them, as if its connection had lost them), counting the progress
// notifications in them (`record.dropped`).
const PROGRESS = 'notifications/progress';
function holdable(body) {
    let text = '';
    const decoder = new TextDecoder();
    return body.pipeThrough(
        new TransformStream({
            transform(chunk, controller) {
                if (!record.holding) {
                    controller.enqueue(chunk);
                    return;
                }
                text += decoder.decode(chunk, { stream: true });
                let at;
                while ((at = text.indexOf(PROGRESS)) !== -1) {
                    record.dropped++;
                    text = text.slice(at + PROGRESS.length);
                }
                text = text.slice(-(PROGRESS.length - 1));
                poke();
            },
        }),
    );
}

async function recordingFetch(input, init = {}) {
    const method = init.method ?? 'GET';
    const kind = method === 'POST' ? `POST ${kindOf(init.body)}` : method;
    record.requests[kind] = (record.requests[kind] ?? 0) + 1;
    const response = await fetch(input, init);
    if (method === 'GET') {
        record.gets.push(response.status);
        if (new Headers(init.headers).has('last-event-id')) {
            record.resumes.push(response.status);
        }
        poke();
    }
    const sse = (response.headers.get('content-type') ?? '').startsWith('text/event-stream');
    if (!sse || !response.body) {
        return response;
    }
    const stream = method === 'GET' ? 'GET' : kindOf(init.body);
    const body = tap(response.body, stream);
    return new Response(stream === 'tools/call' ? holdable(body) : body, {
        status: response.status,
        statusText: response.statusText,
        headers: response.headers,
    });
}

// The POSTs sent so far.
const posts = () =>
    Object.entries(record.requests)
        .filter(([kind]) => kind.startsWith('POST '))
        .reduce((sum, [, n]) => sum + n, 0);

// What the client reported to `onerror`.
const errors = [];

// The list changes the client's handler was told of.
let notified = 0;
const onListChanged = () => {
    notified++;
    poke();
};

// Serves `expect N` commands (each answered with a `notified` line) until `next`.
async function listenForChanges() {
    for (;;) {
        const line = await command();
        if (line === 'next') {
            return;
        }
        const [word, count] = line.split(' ');
        if (word !== 'expect' || !(Number(count) > 0)) {
            throw new Error(`expected "expect N" or "next" on stdin, got ${JSON.stringify(line)}`);
        }
        await until(`${count} tools/list_changed`, () => notified >= Number(count));
        say('notified', { count: notified, on: record.listChangedOn });
    }
}

// 24 echo calls one after another, then 12 at once; each must say its text back.
async function echoes(client) {
    const call = async (text) => {
        const result = await client.callTool({ name: 'echo', arguments: { text } });
        expect(`echo ${text}`, result.content?.[0]?.text, text);
    };
    for (let i = 0; i < 24; i++) {
        await call(`one after another ${i}`);
    }
    await Promise.all(Array.from({ length: 12 }, (_, i) => call(`at once ${i}`)));
    return 36;
}

async function legacy() {
    let asked = 0;
    const client = new Client1({ name: 'fleet-sdk-1', version: '1' }, { capabilities: { sampling: {} } });
    client.onerror = (e) => errors.push(e.message);
    client.setRequestHandler(CreateMessageRequestSchema, async (request) => {
        asked++;
        expect('the sampling prompt', request.params.messages[0].content.text, 'Write a haiku about fleets');
        return {
            role: 'assistant',
            model: 'ts-fleet-model',
            stopReason: 'endTurn',
            content: { type: 'text', text: 'nodes come and go' },
        };
    });
    client.setNotificationHandler(ToolListChangedNotificationSchema, onListChanged);
    const transport = new Http1(url, { fetch: recordingFetch });
    await client.connect(transport);
    // The GET stream opens after `initialized`, without being awaited by `connect`.
    await until('the GET stream open', () => record.gets.includes(200));
    say('connected', {
        session: transport.sessionId,
        protocolVersion: transport.protocolVersion,
        requests: record.requests,
        gets: record.gets,
    });
    await next();

    const before = posts();
    const tools = await client.listTools();
    const names = tools.tools.map((t) => t.name);
    for (const name of ['echo', 'haiku', 'unlock']) {
        if (!names.includes(name)) {
            throw new Error(`tools/list: no ${name} in ${JSON.stringify(names)}`);
        }
    }
    const calls = await echoes(client);
    say('calls', { posts: posts() - before, answered: calls + 1 });
    await next();

    const beforeSampling = posts();
    const haiku = await client.callTool({ name: 'haiku', arguments: { topic: 'fleets' } });
    expect('haiku', haiku.content?.[0]?.text, 'ts-fleet-model wrote: nodes come and go');
    expect('sampling requests answered', asked, 1);
    say('sampling', { posts: posts() - beforeSampling, text: haiku.content[0].text });
    await next();

    expect('errors so far', errors, []);
    say('listening', { gets: record.gets });
    await listenForChanges();
    expect('the GET requests', record.gets, [200]);
    expect('errors while listening', errors, []);

    const session = transport.sessionId;
    await transport.terminateSession();
    await client.close();
    say('deleted', { session, requests: record.requests, listChangedOn: record.listChangedOn });
}

// A call whose instance is killed (`kill -9`, by the test) while it runs, after the client
// missed (dropped unread) at least two of its progress notifications: the SDK resumes the
// call's stream with `Last-Event-ID` (a GET, which nginx sends to a live instance), gets every
// stored progress notification it missed, each once, and then the error that ends the lost
// call.
async function resume() {
    const client = new Client1({ name: 'fleet-sdk-1-resume', version: '1' }, { capabilities: {} });
    client.onerror = (e) => errors.push(e.message);
    const transport = new Http1(url, { fetch: recordingFetch });
    await client.connect(transport);
    await until('the GET stream open', () => record.gets.includes(200));
    say('connected', { session: transport.sessionId, protocolVersion: transport.protocolVersion });
    await next();

    const progress = [];
    const outcome = client
        .callTool({ name: 'countdown', arguments: { steps: 20, delay_ms: 500 } }, undefined, {
            onprogress: (p) => {
                progress.push(p.progress);
                poke();
            },
        })
        .then(
            (result) => ({ result }),
            (error) => ({ error: { code: error.code, message: error.message } }),
        );
    await until('3 progress notifications', () => progress.length >= 3);
    // From here the client misses what the call's stream brings, until its instance is killed.
    record.holding = true;
    await until('2 progress notifications missed', () => record.dropped >= 2);
    say('running', { progress, missed: record.dropped });
    await next();

    const { result, error } = await outcome;
    if (result) {
        throw new Error(`countdown ran to its end on a killed instance: ${JSON.stringify(result)}`);
    }
    await client.close();
    say('resumed', { progress, error, resumes: record.resumes });
}

// Redis killed (`kill -9`, by the test) and restarted with its data: while it is down the legacy
// client's calls are refused with 503 on every instance, and the modern client's calls (which need
// no Redis) are answered; once it is back, the legacy session is served again, with no new
// `initialize`.
async function redisLoss() {
    const legacyClient = new Client1({ name: 'fleet-sdk-1-redis', version: '1' }, { capabilities: {} });
    legacyClient.onerror = (e) => errors.push(e.message);
    const transport = new Http1(url, { fetch: recordingFetch });
    await legacyClient.connect(transport);
    const modernClient = new Client2(
        { name: 'fleet-client-2-redis', version: '2' },
        { capabilities: {}, versionNegotiation: { mode: { pin: '2026-07-28' } } },
    );
    await modernClient.connect(new Http2(url));
    const echo = async (client, text) => {
        const result = await client.callTool({ name: 'echo', arguments: { text } });
        expect(`echo ${text}`, result.content?.[0]?.text, text);
    };
    for (let i = 0; i < 3; i++) {
        await echo(legacyClient, `before ${i}`);
    }
    say('connected', { session: transport.sessionId });
    await next();

    // Three calls through nginx round-robin: one for each instance.
    const refused = [];
    for (let i = 0; i < 3; i++) {
        try {
            await echo(legacyClient, `while down ${i}`);
            refused.push('answered');
        } catch (error) {
            refused.push(error.code ?? String(error));
        }
    }
    for (let i = 0; i < 6; i++) {
        await echo(modernClient, `modern while down ${i}`);
    }
    say('refused', { refused, modern: 6 });
    await next();

    // Served again within 10 s: the call is tried again every 100 ms while it gets 503.
    const started = Date.now();
    let tries = 0;
    for (;;) {
        tries++;
        try {
            await echo(legacyClient, `again ${tries}`);
            break;
        } catch (error) {
            if (error.code !== 503 || Date.now() - started > 10_000) {
                throw error;
            }
            await new Promise((resolve) => setTimeout(resolve, 100));
        }
    }
    const after = Date.now() - started;
    for (let i = 0; i < 6; i++) {
        await echo(legacyClient, `after ${i}`);
    }
    await legacyClient.close();
    await modernClient.close();
    say('served', { tries, after, requests: record.requests });
}

async function modern() {
    let elicited = 0;
    const client = new Client2(
        { name: 'fleet-client-2', version: '2' },
        { capabilities: { elicitation: {} }, versionNegotiation: { mode: { pin: '2026-07-28' } } },
    );
    client.onerror = (e) => errors.push(e.message);
    client.setRequestHandler('elicitation/create', async (request) => {
        elicited++;
        expect('the elicitation message', request.params.message, 'Really deploy?');
        return { action: 'accept', content: { confirm: true } };
    });
    client.setNotificationHandler(LIST_CHANGED, onListChanged);
    const transport = new Http2(url, { fetch: recordingFetch });
    await client.connect(transport);
    expect('era', client.getProtocolEra(), 'modern');
    say('connected', { requests: record.requests });
    await next();

    const before = posts();
    const calls = await echoes(client);
    say('calls', { posts: posts() - before, answered: calls });
    await next();

    const confirm = await client.callTool({ name: 'confirm', arguments: { action: 'deploy' } });
    expect('confirm', confirm.content?.[0]?.text, 'deploy: done');
    expect('elicitations answered', elicited, 1);
    say('confirm', { text: confirm.content[0].text });
    await next();

    // `listen` resolves once the server acknowledged the subscription.
    const subscription = await client.listen({ toolsListChanged: true });
    expect('honored filter', subscription.honoredFilter, { toolsListChanged: true });
    expect('errors so far', errors, []);
    say('listening', { honored: subscription.honoredFilter });
    await listenForChanges();
    expect('errors while listening', errors, []);

    await subscription.close();
    const closed = await subscription.closed;
    await client.close();
    say('done', { closed, requests: record.requests, listChangedOn: record.listChangedOn });
}

try {
    if (mode === 'legacy') {
        await legacy();
    } else if (mode === 'redis') {
        await redisLoss();
    } else if (mode === 'resume') {
        await resume();
    } else if (mode === 'modern') {
        await modern();
    } else {
        throw new Error(`unknown mode ${JSON.stringify(mode)} (legacy, resume, redis or modern)`);
    }
    process.exit(0);
} catch (error) {
    const reported = errors.length > 0 ? `\nreported to onerror: ${errors.join('; ')}` : '';
    say('failed', { detail: String(error?.stack ?? error) + reported });
    process.exit(1);
}
