import test from 'ava';
import OpenAI from 'openai';
import { offsetClock, offsetToNextMinute } from '../../services/kit/clock.js';
import { loadBaseConfig } from '../../services/kit/settings/index.js';
import { randomBase62 } from '../../services/kit/secrets.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';

// The whole platform behind the embedded edge (deck/kong.yaml), with the real per-address limit
// (100/minute): what an API client sees of the edge's authentication, errors, CORS and probes.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
let p: TestPlatform;

test.before(async () => {
  p = await startTestPlatform({
    clock: offsetClock(offsetToNextMinute()),
    env: { BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY, EDGE_RATE_LIMIT_IP_PER_MINUTE: '100', EDGE_CORS_ORIGINS: 'https://app.example' },
  });
});
test.after.always(async () => {
  await p?.stop();
});

async function call(path: string, init: RequestInit = {}) {
  const res = await fetch(`${p.url}${path}`, init);
  const text = await res.text();
  let json: any = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = text;
  }
  return { status: res.status, headers: res.headers, json, text };
}

async function guest() {
  const login = await call('/llm/auth/guest-login', { method: 'POST' });
  if (login.status !== 200 && login.status !== 201) throw new Error(`guest login: ${login.status}`);
  return login.json as { access_token: string; user_id: string };
}

async function keyFor(userId: string) {
  const created = await call('/v1/admin/api-keys', {
    method: 'POST',
    headers: { 'x-api-key': ADMIN_KEY, 'content-type': 'application/json' },
    body: JSON.stringify({ user_id: userId, name: 'conformance', tier: 'pro' }),
  });
  if (created.status !== 201) throw new Error(`key create: ${created.status} ${created.text}`);
  return created.json as { id: string; key: string };
}

/** A token of the embedded issuer, signed correctly but expired (the edge must refuse it). */
function expiredTokenLike(token: string): string {
  const [h, body, sig] = token.split('.');
  const claims = JSON.parse(Buffer.from(body!, 'base64url').toString());
  return `${h}.${Buffer.from(JSON.stringify({ ...claims, exp: claims.iat - 10 })).toString('base64url')}.${sig}`;
}

test.serial('OR logic through the openai SDK: a refused token beside a valid key (and the reverse) is authenticated by the valid one', async (t) => {
  const user = await guest();
  const { key } = await keyFor(user.user_id);
  // The SDK sends apiKey as the bearer; the other credential rides along as a default header.
  const staleTokenValidKey = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: expiredTokenLike(user.access_token), defaultHeaders: { 'X-API-Key': key }, maxRetries: 0 });
  t.true(Array.isArray((await staleTokenValidKey.models.list()).data));
  const validTokenUnknownKey = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: user.access_token, defaultHeaders: { 'X-API-Key': `sk_${randomBase62(32)}` }, maxRetries: 0 });
  t.true(Array.isArray((await validTokenUnknownKey.models.list()).data));
  // Both refused → 401 naming both reasons, with the request id in the body and the header.
  const bothBad = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: expiredTokenLike(user.access_token), defaultHeaders: { 'X-API-Key': `sk_${randomBase62(32)}` }, maxRetries: 0 });
  const error = await t.throwsAsync(bothBad.models.list(), { instanceOf: OpenAI.AuthenticationError });
  t.like(error!.error, { type: 'auth_error', code: 'unauthorized' });
  t.regex((error!.error as { message: string }).message, /Invalid token|Token signature is invalid|Token expired/);
  t.regex((error!.error as { message: string }).message, /Invalid API key/);
  t.truthy(error!.requestID);
  t.is((error!.error as { request_id: string }).request_id, String(error!.requestID));
  // Two valid credentials of different users stay refused.
  const other = await guest();
  const { key: otherKey } = await keyFor(other.user_id);
  const mixed = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: user.access_token, defaultHeaders: { 'X-API-Key': otherKey }, maxRetries: 0 });
  await t.throwsAsync(mixed.models.list(), { instanceOf: OpenAI.AuthenticationError, message: /different users/ });
});

test.serial('every edge-generated error carries request_id in the body and X-Request-ID: missing credentials, bad credentials, unknown route', async (t) => {
  for (const [path, init, status] of [
    ['/v1/models', {}, 401],
    ['/v1/models', { headers: { 'x-api-key': 'sk_short' } }, 401],
    ['/v1/models', { headers: { 'x-request-id': 'client-chosen-id-1' } }, 401],
    ['/nowhere', {}, 404],
    ['/internal/auth/validate-api-key', { method: 'POST' }, 404],
  ] as const) {
    const res = await call(path, init as RequestInit);
    t.is(res.status, status, path);
    t.truthy(res.headers.get('x-request-id'), `${path}: X-Request-ID`);
    t.is(res.json.error.request_id, res.headers.get('x-request-id'), `${path}: body request_id`);
  }
  t.is((await call('/v1/models', { headers: { 'x-request-id': 'client-chosen-id-1' } })).json.error.request_id, 'client-chosen-id-1');
});

test.serial('Authorization: Bearer not-a-key gets a clear "invalid credentials" message (openai SDK)', async (t) => {
  const client = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: 'not-a-key', maxRetries: 0 });
  const error = await t.throwsAsync(client.models.list(), { instanceOf: OpenAI.AuthenticationError });
  t.regex((error!.error as { message: string }).message, /^Invalid credentials: /);
  t.notRegex((error!.error as { message: string }).message, /header must be/);
});

test.serial('CORS: a browser preflight for the openai SDK and MCP headers is answered without a credential; answers expose what clients read', async (t) => {
  const requested = [
    'authorization',
    'content-type',
    'x-stainless-os',
    'x-stainless-lang',
    'x-stainless-retry-count',
    'x-stainless-timeout',
    'openai-organization',
    'openai-project',
    'mcp-session-id',
    'mcp-protocol-version',
  ];
  const preflight = await call('/v1/chat/completions', {
    method: 'OPTIONS',
    headers: { origin: 'https://app.example', 'access-control-request-method': 'POST', 'access-control-request-headers': requested.join(',') },
  });
  t.is(preflight.status, 200);
  t.is(preflight.headers.get('access-control-allow-origin'), 'https://app.example');
  const allowed = (preflight.headers.get('access-control-allow-headers') ?? '').toLowerCase().split(',');
  for (const header of requested) t.true(allowed.includes(header), `preflight allows ${header}`);

  const user = await guest();
  const { key } = await keyFor(user.user_id);
  const res = await call('/v1/models', { headers: { origin: 'https://app.example', 'x-api-key': key } });
  t.is(res.status, 200);
  const exposed = (res.headers.get('access-control-expose-headers') ?? '').toLowerCase().split(',');
  for (const header of ['x-request-id', 'x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset', 'retry-after', 'x-should-retry', 'mcp-session-id']) {
    t.true(exposed.includes(header), `exposes ${header}`);
  }
});

test.serial('only a real preflight passes without a credential: any other OPTIONS request is authenticated', async (t) => {
  const bare = await call('/v1/models', { method: 'OPTIONS' });
  t.is(bare.status, 401);
  t.is(bare.json.error.request_id, bare.headers.get('x-request-id'));
  const originOnly = await call('/v1/models', { method: 'OPTIONS', headers: { origin: 'https://app.example' } });
  t.is(originOnly.status, 401);
  const methodOnly = await call('/v1/models', { method: 'OPTIONS', headers: { 'access-control-request-method': 'GET' } });
  t.is(methodOnly.status, 401);
});

test.serial('the edge answers /healthz and /readyz outside every limit, and serves /metrics', async (t) => {
  // 150 probes from one address against a per-address limit of 100 a minute: none is refused.
  for (let i = 0; i < 150; i++) {
    const res = await fetch(`${p.url}/healthz`);
    await res.arrayBuffer();
    if (res.status !== 200) return t.fail(`probe ${i} answered ${res.status}`);
    t.is(res.headers.get('x-ratelimit-remaining-minute'), null);
  }
  for (let i = 0; i < 110; i++) {
    const res = await fetch(`${p.url}/readyz`);
    await res.arrayBuffer();
    if (res.status !== 200) return t.fail(`readiness probe ${i} answered ${res.status}`);
  }
  t.deepEqual((await call('/readyz')).json, { status: 'ready', service: 'gateway' });
  // On the edge's metrics listener; the public port does not serve them.
  t.is((await call('/metrics')).status, 404);
  const scrape = await fetch(`${p.metricsUrl}/metrics`);
  const metrics = { status: scrape.status, text: await scrape.text() };
  t.is(metrics.status, 200);
  t.regex(metrics.text, /edge_requests_total\{[^}]*route="edge-healthz"[^}]*status="200"[^}]*\} (1[5-9]\d|[2-9]\d\d)/);
  t.notRegex(metrics.text, /route="\/healthz"/, 'labels are route names, never raw paths');
});

test.serial('issuer URLs follow the configuration: derived from GATEWAY_PORT unless JWT_ISSUER is set', async (t) => {
  t.is(loadBaseConfig({ GATEWAY_PORT: '9300' }).JWT_ISSUER, 'http://localhost:9300');
  t.is(loadBaseConfig({ GATEWAY_PORT: '9300', JWT_ISSUER: 'https://api.example' }).JWT_ISSUER, 'https://api.example');
  const discovery = await call('/.well-known/openid-configuration');
  t.is(discovery.status, 200);
  t.is(discovery.json.issuer, p.runtime.config.JWT_ISSUER);
  t.true(String(discovery.json.jwks_uri).startsWith(p.runtime.config.JWT_ISSUER));
  const user = await guest();
  const claims = JSON.parse(Buffer.from(user.access_token.split('.')[1]!, 'base64url').toString());
  t.is(claims.iss, p.runtime.config.JWT_ISSUER, 'tokens, discovery and the edge agree');
});

test.serial('the API reference is public at the edge: GET /openapi.json without a credential', async (t) => {
  const res = await call('/openapi.json');
  t.is(res.status, 200);
  t.regex(res.headers.get('content-type') ?? '', /^application\/json/);
  t.is(res.json.openapi, '3.1.0');
  t.truthy(res.json.paths['/v1/chat/completions'], 'the document lists the API');
  t.truthy(res.headers.get('x-request-id'));
  const post = await call('/openapi.json', { method: 'POST' });
  t.is(post.status, 405, 'read-only: only GET and HEAD are routed');
  t.is(post.headers.get('allow'), 'GET, HEAD');
});
