// The TypeScript SDK's OAuth client (`@modelcontextprotocol/client` 2.x, its `OAuthClientProvider`
// and `auth()` flow) against a modelctx server protected by modelctx-auth, whose authorization
// server is oidc-provider (tests/ts/oidc-as.mjs). Usage: `node auth-client.mjs <mcp url> <issuer>`;
// the Rust side is tests/tests/it/auth_ts.rs.
//
// In each era (legacy: 2025-11-25 with `initialize`; modern: pinned to 2026-07-28), three
// clients, each with a provider of its own: `dcr` registers dynamically (RFC 7591); `app` is the
// AS's pre-registered public client; `dpop` is `app` with a DPoP key (RFC 9449). Each:
// 1. connects without a token: the server answers 401 with a challenge naming its protected
//    resource metadata; the SDK reads that document, finds the AS in it, reads the AS's metadata,
//    registers (`dcr`) and starts authorization code + PKCE with the `resource` parameter
//    (RFC 8707). The provider follows the AS's redirects with fetch (the AS logs in alice and
//    consents by itself) up to the redirect URI, where the code is; `finishAuth` exchanges it for
//    a token, and a new connection calls the tool `whoami`;
// 2. a second transport on the same token, told to throw on `insufficient_scope`, calls `write`
//    (it needs `files:write`, which the first token lacks): the server's 403 reaches the caller
//    as the SDK's InsufficientScopeError with the scope the server asked for;
// 3. the first connection calls `write`: the SDK's step-up flow (SEP-2350) authorizes again for
//    the union of the scopes; once that code is exchanged, the call is repeated and succeeds. For
//    `dcr` the AS refuses instead (see `run`).
//
// Prints, per era and client: `FLOW <era> <client> <json>` (the requests of step 1, see
// `traced`), `OK <era> <client> <whoami text>`, `REFUSED <era> <client> <required scope>`,
// `STEPUP <era> <client> <write text, or "refused <OAuth error>">`; and `FAIL <era> <client>
// <error>` when a step went otherwise. Exits 0 when every step passed.
//
// With a third argument, the URL of a server that requires DPoP and DPoP nonces of its own, a
// fourth client `nonce` (as `dpop`) runs against that one: its first proof to that server has no
// nonce, and the SDK must retry with the one the server's `use_dpop_nonce` challenge gave.

import {
    Client,
    DpopSession,
    InsufficientScopeError,
    OAuthError,
    StreamableHTTPClientTransport,
    UnauthorizedError,
} from '@modelcontextprotocol/client';

const url = new URL(process.argv[2]);
const issuer = process.argv[3];
// A second server that requires DPoP and its own nonces, when given.
const nonceUrl = process.argv[4] && new URL(process.argv[4]);
const REDIRECT = 'http://127.0.0.1/cb';

// A fetch that records every request it makes as `METHOD url status` (the query left out),
// followed by the scheme of its `Authorization` and ` proof` when it carries a `DPoP` header.
function traced(trace) {
    return async (input, init) => {
        const request = new Request(input, init);
        const response = await fetch(request);
        const where = new URL(request.url);
        const scheme = request.headers.get('authorization')?.split(' ')[0];
        const proof = request.headers.has('dpop') ? ' proof' : '';
        trace.push(`${request.method} ${where.origin}${where.pathname} ${response.status}${scheme ? ` ${scheme}` : ''}${proof}`);
        return response;
    };
}

// An OAuthClientProvider kept in memory: one registration, one token set, one PKCE verifier and
// the discovery state (the SDK checks the callback's issuer against it). Authorization follows
// the AS's redirects itself, carrying its cookies, until the redirect URI: `callback` is then
// that URL's query (code, state, iss), for `finishAuth`. `registered`: the client id of a
// pre-registered client (else the SDK registers one); `dpop`: one DPoP key for the token
// requests and the requests to the server (the SDK asks the AS for a bound token, and presents
// it with the `DPoP` scheme and a proof per request).
class MemoryProvider {
    constructor(trace, { registered, dpop, server }) {
        this.server = server;
        this.trace = trace;
        this.fetch = traced(trace);
        if (dpop) {
            const session = DpopSession.create();
            this.dpop = () => session;
        }
        // Stamped with its issuer, as the SDK keeps what it stores (SEP-2352).
        this.client = registered === undefined ? undefined : { client_id: registered, issuer };
        this.saved = undefined;
        this.verifier = undefined;
        this.discovery = undefined;
        this.callback = undefined;
        this.authorizations = 0;
    }

    get redirectUrl() {
        return REDIRECT;
    }

    get clientMetadata() {
        return {
            client_name: 'modelctx auth-client.mjs',
            redirect_uris: [REDIRECT],
            grant_types: ['authorization_code'],
            response_types: ['code'],
            token_endpoint_auth_method: 'none',
        };
    }

    clientInformation() {
        return this.client;
    }

    saveClientInformation(information) {
        this.client = information;
    }

    tokens() {
        return this.saved;
    }

    saveTokens(tokens) {
        this.saved = tokens;
    }

    saveCodeVerifier(verifier) {
        this.verifier = verifier;
    }

    codeVerifier() {
        return this.verifier;
    }

    discoveryState() {
        return this.discovery;
    }

    saveDiscoveryState(state) {
        this.discovery = state;
    }

    // The user agent: GETs the authorization URL and each redirect after it (at most 10), with
    // the cookies the AS set, until a redirect to REDIRECT.
    async redirectToAuthorization(authorizationUrl) {
        this.authorizations += 1;
        const asked = new URL(authorizationUrl);
        for (const name of ['resource', 'code_challenge', 'scope']) {
            if (!asked.searchParams.get(name)) throw new Error(`the authorization URL has no ${name}: ${asked}`);
        }
        if (asked.searchParams.get('resource') !== this.server.href) {
            throw new Error(`the authorization URL names another resource: ${asked}`);
        }
        this.asked = asked.searchParams;
        const cookies = new Map();
        let next = asked;
        for (let hop = 0; hop < 10; hop++) {
            const cookie = [...cookies].map(([k, v]) => `${k}=${v}`).join('; ');
            const response = await this.fetch(next, { redirect: 'manual', headers: cookie ? { cookie } : {} });
            for (const line of response.headers.getSetCookie()) {
                const [pair] = line.split(';');
                const at = pair.indexOf('=');
                cookies.set(pair.slice(0, at).trim(), pair.slice(at + 1).trim());
            }
            const location = response.headers.get('location');
            await response.arrayBuffer();
            if (!location) throw new Error(`GET ${next}: ${response.status} without a redirect`);
            next = new URL(location, next);
            if (`${next.origin}${next.pathname}` === REDIRECT) {
                this.callback = next.searchParams;
                return;
            }
        }
        throw new Error('more than 10 redirects from the authorization endpoint');
    }

    // The callback's query, once: for `finishAuth`.
    takeCallback() {
        const callback = this.callback;
        this.callback = undefined;
        if (!callback) throw new Error('no authorization callback');
        if (!callback.get('code')) throw new Error(`the authorization failed: ${callback}`);
        return callback;
    }
}

const text = (result) => result.content.map((c) => c.text).join('');

// `f()` must fail with an error of class `kind`; that error.
async function refused(what, kind, f) {
    try {
        await f();
    } catch (error) {
        if (error instanceof kind) return error;
        throw new Error(`${what}: ${kind.name} expected, got ${error?.stack ?? error}`);
    }
    throw new Error(`${what}: ${kind.name} expected, but it succeeded`);
}

// One client's run in one era, as `MemoryProvider`'s options say. Prints its lines, prefixed by
// `<KIND> <era> <name>`.
async function run(era, mode, name, options) {
    const say = (kind, what) => console.log(`${kind} ${era} ${name} ${what}`);
    const trace = [];
    const server = options.server ?? url;
    const provider = new MemoryProvider(trace, { ...options, server });
    const transport = (more = {}) =>
        new StreamableHTTPClientTransport(server, { authProvider: provider, fetch: provider.fetch, ...more });
    const client = () => new Client({ name: 'auth-client', version: '1' }, { versionNegotiation: { mode } });

    // 1. Unauthorized first: the SDK discovers, registers and sends the user agent off.
    const first = transport();
    await refused('connecting without a token', UnauthorizedError, () => client().connect(first));
    if (provider.authorizations !== 1) throw new Error(`${provider.authorizations} authorizations`);
    await first.finishAuth(provider.takeCallback());
    const connected = client();
    const main = transport();
    await connected.connect(main);
    const got = connected.getProtocolEra();
    if (got !== era) throw new Error(`era ${got}, ${era} expected`);
    say('FLOW', JSON.stringify(trace));
    say('OK', text(await connected.callTool({ name: 'whoami', arguments: {} })));

    // 2. A transport that throws on insufficient_scope: the 403 as the SDK reports it.
    const strict = client();
    await strict.connect(transport({ onInsufficientScope: 'throw' }));
    const error = await refused('write without files:write', InsufficientScopeError, () =>
        strict.callTool({ name: 'write', arguments: {} }),
    );
    say('REFUSED', error.requiredScope);
    await strict.close();

    // 3. Step-up on the first connection: authorized again for the union of the scopes, then
    // the call repeated. A dynamically registered client was registered with the scope of the
    // first challenge (the SDK sends it in its registration) and the AS holds it to that
    // (RFC 7591 `scope`): its step-up ends at the redirect URI with `invalid_scope`.
    await refused('write before the step-up code is exchanged', UnauthorizedError, () =>
        connected.callTool({ name: 'write', arguments: {} }),
    );
    if (provider.authorizations !== 2) throw new Error(`${provider.authorizations} authorizations`);
    const scope = provider.asked.get('scope').split(' ').sort().join(' ');
    if (scope !== 'files:write mcp') throw new Error(`step-up asked for scope ${scope}`);
    const callback = provider.callback;
    provider.callback = undefined;
    if (callback?.get('error')) {
        const failed = await refused('the step-up code exchange', OAuthError, () => main.finishAuth(callback));
        say('STEPUP', `refused ${failed.code}`);
    } else {
        await main.finishAuth(callback);
        say('STEPUP', text(await connected.callTool({ name: 'write', arguments: {} })));
    }
    await connected.close();
}

let failed = false;
for (const [era, mode] of [
    ['legacy', 'legacy'],
    ['modern', { pin: '2026-07-28' }],
]) {
    const clients = [
        ['dcr', {}],
        ['app', { registered: 'app' }],
        ['dpop', { registered: 'app', dpop: true }],
    ];
    if (nonceUrl) clients.push(['nonce', { registered: 'app', dpop: true, server: nonceUrl }]);
    for (const [name, options] of clients) {
        try {
            await run(era, mode, name, options);
        } catch (error) {
            failed = true;
            console.log(`FAIL ${era} ${name} ${String(error?.stack ?? error).replaceAll('\n', ' | ')}`);
        }
    }
}
process.exit(failed ? 1 : 0);
