// A real OAuth 2.1 authorization server for the resource-server tests: oidc-provider 9.13.3 on
// 127.0.0.1, a port chosen by the OS. Usage: `node oidc-as.mjs [--forms] <resource>...` (the resource
// indicators it knows, e.g. http://127.0.0.1:PORT/mcp). It prints `LISTENING <issuer>` once it
// answers, and exits when its stdin closes. The Rust side is tests/src/oidc.rs.
//
// What it offers:
// - clients: `svc`/`s` (client_credentials, client_secret_basic), `app` (public, authorization
//   code + PKCE, redirect http://127.0.0.1/cb), `rs`/`rs-secret` (introspection only); dynamic
//   registration is open (for SDK clients).
// - resource indicators: the resources on the command line, and each one with `/opaque`
//   appended; any other resource is refused (`invalid_target`). A resource gets RFC 9068 JWTs
//   signed ES256 by the current key, with `aud` = the resource; `<resource>/opaque` gets opaque
//   tokens whose `aud` (in introspection) is `<resource>`, so one resource server sees both kinds
//   (a listed resource that itself ends in `/opaque` gets opaque tokens for itself). Resource
//   scopes: `mcp demo:admin files:write`. Without a `resource` parameter the first resource is used.
// - token lifetime: 3600 s, or the seconds of an `X-Test-Ttl` header on the token request.
// - interactions: `/interaction/:uid` logs in `alice` and consents to whatever was asked.
// - `--forms` (first argument; the OAuth client's end-to-end tests, tests/tests/it/oauth_client.rs):
//   the interactions are oidc-provider's devInteractions instead, a login form (any login and
//   password) then a consent form, which the test posts as a user would (`FormUser` in
//   tests/src/oidc.rs); token revocation (RFC 7009, `/token/revocation`) is on; one more static
//   client `cli` (public, native, redirect http://127.0.0.1/callback on any port, RFC 8252 7.3).
// - DPoP: enabled, nonces required at the token endpoint (so clients exercise `use_dpop_nonce`).
// - test routes: POST /_test/rotate (a new signing key in front, the old ones kept for verifying;
//   answers {kid, kids}), POST /_test/sign {header, claims} (signs with the current key; see
//   signArbitrary), GET /_test/stats ({jwks, introspect, token}: requests seen), POST
//   /_test/resource {resource} (one more resource indicator, for a server whose port is known
//   only once it listens).
//
// Checked against oidc-provider 9.13.3's source (node_modules/oidc-provider/lib), the points the
// design marked "to verify":
// - JWT access tokens (lib/models/formats/jwt.js): header `typ: at+jwt` and the signing key's
//   `kid`; claims jti, sub, iat, exp, scope (absent when no scope was granted), client_id, iss, aud,
//   and `cnf.jkt` when DPoP-bound. `sub` is ALWAYS present: the account id for user tokens, else
//   the client id (client_credentials tokens have `sub` = "svc"). `aud` is a single string: the
//   resource's `audience` (lib/models/base_token.js; here the resource given on the command line).
// - Introspection (lib/actions/introspection.js): JWT access tokens are refused
//   (`unsupported_token_type`, lib/shared/reject_structured_tokens.js): only opaque tokens can be
//   introspected. An active response has active, client_id, exp, iat, iss, jti (omitted when it
//   equals the token, which is always the case for opaque tokens: their value is their id), aud
//   (the resource's audience: yes, it is returned for resource-bound tokens), scope, token_type
//   ("Bearer" or "DPoP"), `cnf: {jkt}` when DPoP-bound, and `sub` ONLY for tokens with an
//   account (auth code): a client_credentials opaque token has no `sub` in introspection,
//   although its JWT form has sub = client id. Inactive: exactly {active: false}.
//   The default allowedPolicy lets any confidential client introspect any token; ours allows all.
// - Token format (lib/models/formats/index.js): `accessTokenFormat` of the resource server,
//   default 'opaque'; without resource indicators every access token is opaque.
// - Resource scopes are filtered to the resource's `scope`; unknown ones are dropped silently,
//   not refused (lib/actions/grants/client_credentials.js). client_credentials accepts a single
//   resource only.
// - Signing key choice (lib/helpers/keystore.js): a stable sort by score over the configured
//   keys, so the first ES256 key signs and the later ones are only published in the JWKS.
//   The keystore is fixed at construction, so rotation builds a new Provider on the same storage.
// - DPoP (lib/helpers/validate_dpop.js): proofs without a nonce must have iat within 300 s; with
//   `requireNonce` the token endpoint answers 400 `use_dpop_nonce` with a `DPoP-Nonce` header;
//   the token endpoint also checks htm, htu (no query), jti replay per client; `cnf.jkt` is the
//   RFC 7638 SHA-256 thumbprint of the proof's jwk.
// - `openid` is not required at the authorization endpoint for plain OAuth requests; PKCE is
//   required for public clients (token_endpoint_auth_method none).
// - The built-in memory adapter is a module-global LRU of 1000 entries; ours (below) is an
//   unbounded Map with expiry, so token-heavy tests cannot evict live tokens.

import * as crypto from 'node:crypto';
import * as http from 'node:http';

import * as jose from 'jose';
import Provider, { errors } from 'oidc-provider';

const forms = process.argv[2] === '--forms';
const resources = process.argv.slice(forms ? 3 : 2);
// indicator -> [audience, format]: each resource gets JWTs; `<resource>/opaque` gets opaque
// tokens whose audience is the resource itself (so one resource server sees both kinds).
const indicators = (r) => [
  [r, [r, r.endsWith('/opaque') ? 'opaque' : 'jwt']],
  [`${r.replace(/\/$/, '')}/opaque`, [r, 'opaque']],
];
const known = new Map(resources.flatMap(indicators));
const RESOURCE_SCOPE = 'mcp demo:admin files:write';

// Storage shared by every Provider this process builds (rotation): model:id -> {payload, exp}.
const store = new Map();
function live(key) {
  const entry = store.get(key);
  if (entry && entry.exp !== undefined && entry.exp <= Date.now()) {
    store.delete(key);
    return undefined;
  }
  return entry?.value;
}
class Adapter {
  constructor(model) { this.model = model; }
  key(id) { return `${this.model}:${id}`; }
  async upsert(id, payload, expiresIn) {
    const exp = typeof expiresIn === 'number' ? Date.now() + expiresIn * 1000 : undefined;
    store.set(this.key(id), { value: payload, exp });
    if (this.model === 'Session') store.set(`sessionUid:${payload.uid}`, { value: id, exp });
    if (payload.userCode) store.set(`userCode:${payload.userCode}`, { value: id, exp });
    if (payload.grantId) {
      const members = live(`grant:${payload.grantId}`) ?? [];
      store.set(`grant:${payload.grantId}`, { value: [...members, this.key(id)] });
    }
  }
  async find(id) { return live(this.key(id)); }
  async findByUid(uid) { return this.find(live(`sessionUid:${uid}`)); }
  async findByUserCode(code) { return this.find(live(`userCode:${code}`)); }
  async consume(id) { const payload = live(this.key(id)); if (payload) payload.consumed = Math.floor(Date.now() / 1000); }
  async destroy(id) { store.delete(this.key(id)); }
  async revokeByGrantId(grantId) {
    for (const key of live(`grant:${grantId}`) ?? []) store.delete(key);
    store.delete(`grant:${grantId}`);
  }
}

let counter = 0;
async function newKey() {
  counter += 1;
  const { privateKey } = await jose.generateKeyPair('ES256', { extractable: true });
  return { ...(await jose.exportJWK(privateKey)), kid: `k${counter}`, alg: 'ES256', use: 'sig' };
}

const hits = { jwks: 0, introspect: 0, token: 0 };
const nonceSecret = crypto.randomBytes(32);
let keys = [await newKey()];

function ttl(ctx, token) {
  const asked = Number.parseInt(ctx?.get('x-test-ttl') ?? '', 10);
  if (Number.isInteger(asked) && asked > 0) return asked;
  return token.resourceServer?.accessTokenTTL ?? 3600;
}

const config = () => ({
  adapter: Adapter,
  jwks: { keys },
  cookies: { keys: ['modelctx-test-cookie-key'] },
  clientDefaults: { id_token_signed_response_alg: 'ES256' },
  clients: [
    { client_id: 'svc', client_secret: 's', grant_types: ['client_credentials'], redirect_uris: [], response_types: [] },
    { client_id: 'app', token_endpoint_auth_method: 'none', redirect_uris: ['http://127.0.0.1/cb'] },
    { client_id: 'rs', client_secret: 'rs-secret', grant_types: [], redirect_uris: [], response_types: [] },
    ...(forms ? [{
      client_id: 'cli',
      token_endpoint_auth_method: 'none',
      application_type: 'native',
      grant_types: ['authorization_code', 'refresh_token'],
      redirect_uris: ['http://127.0.0.1/callback'],
    }] : []),
  ],
  scopes: ['openid', 'offline_access', 'mcp', 'demo:admin', 'files:write'],
  findAccount: (ctx, id) => ({ accountId: id, claims: () => ({ sub: id }) }),
  ttl: { AccessToken: ttl, ClientCredentials: ttl },
  // devInteractions (with `--forms`) bring their own, at the same path.
  ...(forms ? {} : { interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` } }),
  features: {
    devInteractions: { enabled: forms },
    revocation: { enabled: forms },
    clientCredentials: { enabled: true },
    introspection: { enabled: true, allowedPolicy: () => true },
    registration: { enabled: true },
    dPoP: { enabled: true, nonceSecret, requireNonce: () => true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => resources[0],
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, indicator) => {
        if (!known.has(indicator)) throw new errors.InvalidTarget();
        const [audience, accessTokenFormat] = known.get(indicator);
        return {
          scope: RESOURCE_SCOPE,
          audience,
          accessTokenTTL: 3600,
          accessTokenFormat,
          jwt: { sign: { alg: 'ES256' } },
        };
      },
    },
  },
});

let issuer;
let provider;
let handler;
function build() {
  provider = new Provider(issuer, config());
  handler = provider.callback();
}

// Logs in `alice` at the login prompt and grants everything asked at the consent prompt.
async function interaction(req, res) {
  const details = await provider.interactionDetails(req, res);
  const { prompt, params } = details;
  if (prompt.name === 'login') {
    return provider.interactionFinished(req, res, { login: { accountId: 'alice' } }, { mergeWithLastSubmission: false });
  }
  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId: details.session.accountId, clientId: params.client_id });
  if (prompt.details.missingOIDCScope) grant.addOIDCScope(prompt.details.missingOIDCScope.join(' '));
  for (const [indicator, scopes] of Object.entries(prompt.details.missingResourceScopes ?? {})) {
    grant.addResourceScope(indicator, scopes.join(' '));
  }
  const grantId = await grant.save();
  return provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
}

async function body(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const text = Buffer.concat(chunks).toString('utf8');
  return text ? JSON.parse(text) : {};
}

function json(res, status, value) {
  const text = JSON.stringify(value);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

// Signs arbitrary claims with the current key. Header: {alg: ES256, typ: at+jwt, kid: current}
// overridden by the given header; claims: {iss, aud: first resource, sub: alice, client_id: svc,
// scope: mcp, iat: now, exp: now + 300, jti: random} overridden by the given claims. A member
// given as null is removed (e.g. {typ: null} signs without a typ).
async function signArbitrary({ header = {}, claims = {} }) {
  const [current] = keys;
  const now = Math.floor(Date.now() / 1000);
  const drop = (o) => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== null));
  const protectedHeader = drop({ alg: 'ES256', typ: 'at+jwt', kid: current.kid, ...header });
  const payload = drop({
    iss: issuer, aud: resources[0], sub: 'alice', client_id: 'svc', scope: 'mcp',
    iat: now, exp: now + 300, jti: crypto.randomUUID(), ...claims,
  });
  const key = await jose.importJWK(current, 'ES256');
  return new jose.CompactSign(new TextEncoder().encode(JSON.stringify(payload)))
    .setProtectedHeader(protectedHeader)
    .sign(key);
}

async function testRoute(req, res) {
  const { pathname } = new URL(req.url, issuer);
  if (!forms && req.method === 'GET' && pathname.startsWith('/interaction/')) {
    await interaction(req, res);
    return true;
  }
  if (req.method === 'POST' && pathname === '/_test/rotate') {
    keys = [await newKey(), ...keys];
    build();
    json(res, 200, { kid: keys[0].kid, kids: keys.map((k) => k.kid) });
    return true;
  }
  if (req.method === 'POST' && pathname === '/_test/sign') {
    json(res, 200, { token: await signArbitrary(await body(req)) });
    return true;
  }
  if (req.method === 'POST' && pathname === '/_test/resource') {
    const { resource } = await body(req);
    if (typeof resource !== 'string' || !resource.startsWith('http://127.0.0.1')) {
      json(res, 400, { error: 'a loopback resource URI is needed' });
      return true;
    }
    for (const [indicator, info] of indicators(resource)) known.set(indicator, info);
    json(res, 200, { resource });
    return true;
  }
  if (req.method === 'GET' && pathname === '/_test/stats') {
    json(res, 200, hits);
    return true;
  }
  if (pathname === '/jwks') hits.jwks += 1;
  if (pathname === '/token/introspection') hits.introspect += 1;
  if (pathname === '/token') hits.token += 1;
  return false;
}

const server = http.createServer((req, res) => {
  testRoute(req, res).then((done) => {
    if (!done) handler(req, res);
  }).catch((error) => {
    console.error('oidc-as:', error);
    if (!res.headersSent) json(res, 500, { error: String(error) });
    else res.destroy();
  });
});

server.listen(0, '127.0.0.1', () => {
  issuer = `http://127.0.0.1:${server.address().port}`;
  build();
  console.log(`LISTENING ${issuer}`);
});

// The Rust side holds stdin: when it goes (test over, or the process killed), so does the AS.
process.stdin.on('end', () => process.exit(0));
process.stdin.on('close', () => process.exit(0));
process.stdin.resume();
