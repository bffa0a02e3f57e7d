// A protected MCP server on the TypeScript SDK 2.x (`@modelcontextprotocol/server` 2.4.0 with the
// `@modelcontextprotocol/node` adapter), for modelctx's OAuth client (tests/tests/it/oauth_client_ts.rs):
// a resource server in front of oidc-provider (tests/ts/oidc-as.mjs), serving both eras on
// http://127.0.0.1:<port>/mcp.
//
// - Protected resource metadata (RFC 9728) at /.well-known/oauth-protected-resource/mcp, built by
//   the SDK's `oauthMetadataResponse` (`resource` = the server's URL, `authorization_servers` =
//   [the issuer], `scopes_supported` = ['mcp']); it also passes the issuer's RFC 8414 metadata
//   through at /.well-known/oauth-authorization-server.
// - Every /mcp request goes through the SDK's `requireBearerAuth` gate (`requiredScopes: ['mcp']`,
//   `resourceMetadataUrl`, `expectedResource` = the server's URL): 401 with the `Bearer` challenge
//   without a valid token, 403 `insufficient_scope` without `mcp`. Its verifier checks the AS's
//   JWTs with jose (`createRemoteJWKSet` on the issuer's JWKS, `jwtVerify` with the issuer and the
//   resource as audience) and fills `AuthInfo` (`clientId`, `scopes`, `expiresAt`, `resource`).
// - The MCP handler is the SDK's `createMcpHandler` (the 2026-07-28 era per request, the 2025 era
//   by its stateless legacy fallback), given the gate's `AuthInfo`.
// - Tools: `whoami` -> "<sub> <scopes sorted, comma-separated>"; `write` needs `files:write` as
//   well (its `scopeChallenge`, `requireScopes('mcp', 'files:write')`: the SDK answers 403
//   `insufficient_scope` with `scope="mcp files:write"` for a token without it) -> "written by
//   <same>".
//
// Listens on 127.0.0.1, a free port; prints `LISTENING <port>` on stdout once ready; exits when
// its standard input closes.
//
// Usage: node protected-server.mjs <issuer>

import { createServer } from 'node:http';

import { toNodeHandler } from '@modelcontextprotocol/node';
import {
    createMcpHandler,
    getOAuthProtectedResourceMetadataUrl,
    McpServer,
    OAuthError,
    OAuthErrorCode,
    oauthMetadataResponse,
    requireBearerAuth,
    requireScopes,
} from '@modelcontextprotocol/server';
import * as jose from 'jose';

// stdout carries the LISTENING line only.
console.log = console.error;
console.info = console.error;

const issuer = process.argv[2];
if (!issuer) {
    console.error('usage: node protected-server.mjs <issuer>');
    process.exit(2);
}

const asMetadata = await (await fetch(`${issuer}/.well-known/oauth-authorization-server`)).json();
if (asMetadata.issuer !== issuer) {
    console.error(`the metadata of ${issuer} names ${asMetadata.issuer}`);
    process.exit(1);
}
const jwks = jose.createRemoteJWKSet(new URL(asMetadata.jwks_uri));

const text = (value) => ({ content: [{ type: 'text', text: value }] });

/** "<sub> <scopes>" of the caller, as modelctx's test servers say it. */
function caller(ctx) {
    const auth = ctx.http?.authInfo;
    if (!auth) return 'nobody';
    const scopes = [...auth.scopes].sort().join(',');
    return `${auth.extra?.sub ?? auth.clientId} ${scopes}`;
}

function newServer() {
    const server = new McpServer({ name: 'ts-protected', version: '1.0.0' });
    server.registerTool('whoami', { description: 'Who called, with which scopes' }, async (ctx) =>
        text(caller(ctx)),
    );
    server.registerTool(
        'write',
        { description: 'Needs files:write', scopeChallenge: requireScopes('mcp', 'files:write') },
        async (ctx) => text(`written by ${caller(ctx)}`),
    );
    return server;
}

const handler = createMcpHandler(newServer, {
    legacy: 'stateless',
    onerror: (error) => console.error('mcp:', error),
});

/** The gate and the metadata options, once the port (and so the resource) is known. */
let protect;

function setUp(port) {
    const resource = new URL(`http://127.0.0.1:${port}/mcp`);
    const resourceMetadataUrl = getOAuthProtectedResourceMetadataUrl(resource);
    const verifier = {
        async verifyAccessToken(token) {
            let payload;
            try {
                ({ payload } = await jose.jwtVerify(token, jwks, {
                    issuer,
                    audience: resource.href,
                    typ: 'at+jwt',
                }));
            } catch (error) {
                throw new OAuthError(OAuthErrorCode.InvalidToken, `token refused: ${error.message}`);
            }
            const audience = Array.isArray(payload.aud) ? payload.aud[0] : payload.aud;
            return {
                token,
                clientId: payload.client_id,
                scopes: typeof payload.scope === 'string' ? payload.scope.split(' ').filter(Boolean) : [],
                expiresAt: payload.exp,
                resource: new URL(audience),
                extra: { sub: payload.sub },
            };
        },
    };
    protect = {
        metadata: {
            oauthMetadata: asMetadata,
            resourceServerUrl: resource,
            scopesSupported: ['mcp'],
            resourceName: 'ts-protected',
            dangerouslyAllowInsecureIssuerUrl: true,
        },
        gate: requireBearerAuth({
            verifier,
            requiredScopes: ['mcp'],
            resourceMetadataUrl,
            expectedResource: resource,
        }),
    };
}

const nodeHandler = toNodeHandler({
    fetch: async (request) => {
        const metadata = oauthMetadataResponse(request, protect.metadata);
        if (metadata) return metadata;
        if (new URL(request.url).pathname !== '/mcp') {
            return new Response('Not Found', { status: 404 });
        }
        const authInfo = await protect.gate(request);
        if (authInfo instanceof Response) return authInfo;
        return handler.fetch(request, { authInfo });
    },
});

const httpServer = createServer((req, res) => nodeHandler(req, res));
httpServer.listen(0, '127.0.0.1', () => {
    const { port } = httpServer.address();
    setUp(port);
    process.stdout.write(`LISTENING ${port}\n`);
});
httpServer.on('error', (error) => {
    console.error('cannot listen:', error);
    process.exit(1);
});

// The test that spawned this server drops its standard input to stop it.
process.stdin.on('end', () => process.exit(0));
process.stdin.on('close', () => process.exit(0));
process.stdin.resume();
