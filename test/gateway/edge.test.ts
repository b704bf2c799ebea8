import test from 'ava';
import { request as httpRequest } from 'node:http';
import { ManualClock } from '../../services/kit/clock.js';
import { sha256Hex } from '../../services/kit/secrets.js';
import { unsignedToken, AUDIENCE, ISSUER } from '../plugins/fakes.js';
import { GATEWAY_TOKEN, startEdgeWithFakes } from './edge-harness.js';

// A clock placed 10 s after a minute boundary: window arithmetic is exact, no waiting.
const T0 = Date.UTC(2026, 10, 22, 12, 0, 10);
const nowS = T0 / 1000;
const clock = new ManualClock(T0);
let edge: Awaited<ReturnType<typeof startEdgeWithFakes>>;

test.before(async () => {
  edge = await startEdgeWithFakes({ clock, vars: { DECK_RATE_LIMIT_IP_PER_MINUTE: '100000', DECK_RATE_LIMIT_FREE_PER_MINUTE: '100000', DECK_RATE_LIMIT_FREE_PER_DAY: '100000' } });
});
test.after.always(async () => {
  await edge?.close();
});

interface Echo {
  method: string;
  url: string;
  headers: Record<string, string>;
  body: string;
}

async function call(path: string, init: RequestInit = {}) {
  const res = await fetch(`${edge.url}${path}`, init);
  const text = await res.text();
  let json: unknown = null;
  try {
    json = JSON.parse(text);
  } catch {
    json = text;
  }
  return { status: res.status, headers: res.headers, json: json as Record<string, any> };
}

const token = (claims: Record<string, unknown> = {}, options: Parameters<typeof edge.issuer.sign>[1] = {}) =>
  edge.issuer.sign(claims, { iat: nowS - 5, ...options });

test.serial('JWT accepted: identity headers set from the token, gateway token added', async (t) => {
  const jwt = await token({}, { sub: 'user_jwt1' });
  const res = await call('/v1/models', { headers: { authorization: `Bearer ${jwt}` } });
  t.is(res.status, 200);
  const echo = res.json as Echo;
  t.is(echo.url, '/v1/models');
  t.like(echo.headers, { 'x-auth-method': 'jwt', 'x-user-id': 'user_jwt1', 'x-user-subject': 'user_jwt1', 'x-user-email': 'ada@example.test', 'x-user-username': 'ada', 'x-gateway-token': GATEWAY_TOKEN });
  t.truthy(res.headers.get('x-request-id'));
  t.is(echo.headers['x-request-id'], res.headers.get('x-request-id')!);
});

test.serial('API key accepted: key header removed before the upstream, /llm/v1 reaches the same path', async (t) => {
  const key = edge.validator.add('user_key1', 'pro');
  const res = await call('/llm/v1/chat/completions', { method: 'POST', headers: { 'x-api-key': key.key, 'content-type': 'application/json' }, body: '{"model":"m"}' });
  t.is(res.status, 200);
  const echo = res.json as Echo;
  t.is(echo.url, '/llm/v1/chat/completions');
  t.is(echo.body, '{"model":"m"}');
  t.like(echo.headers, { 'x-auth-method': 'apikey', 'x-user-id': 'user_key1' });
  t.false('x-api-key' in echo.headers);
});

test.serial('neither credential → 401 shape A before any service is reached', async (t) => {
  const before = edge.upstream.seen.length;
  for (const path of ['/v1/models', '/v1/responses', '/v1/media/upload', '/v1/mcp', '/auth/api-keys', '/llm/v1/conversations']) {
    const res = await call(path, { method: 'POST' });
    t.is(res.status, 401, path);
    t.like(res.json.error, { type: 'auth_error', code: 'unauthorized' });
    t.is(res.headers.get('www-authenticate'), 'Bearer', 'every 401 names its scheme (RFC 9110)');
  }
  t.is(edge.upstream.seen.length, before);
});

test.serial('expired, not-yet-valid, over-long, wrong-issuer, wrong-audience and alg:none tokens → 401', async (t) => {
  const before = edge.upstream.seen.length;
  const bad = [
    await token({}, { iat: nowS - 4000, exp: nowS - 100 }),
    await token({}, { iat: nowS, nbf: nowS + 300, exp: nowS + 600 }),
    await token({}, { iat: nowS - 5, exp: nowS - 5 + 7200 }),
    await token({}, { iss: 'https://evil.test' }),
    await token({}, { aud: 'someone-else' }),
    unsignedToken({ iss: ISSUER, aud: AUDIENCE, sub: 'user_admin', iat: nowS, exp: nowS + 60 }),
  ];
  for (const jwt of bad) {
    const res = await call('/v1/models', { headers: { authorization: `Bearer ${jwt}` } });
    t.is(res.status, 401);
    t.is(res.json.error.code, 'unauthorized');
    t.is(res.headers.get('www-authenticate'), 'Bearer error="invalid_token"');
  }
  t.is(edge.upstream.seen.length, before);
});

test.serial('OR logic: one valid credential suffices beside a refused one; both refused → 401; a key and a JWT of different users → 401', async (t) => {
  const jwt = await token({}, { sub: 'user_a' });
  const invalidKey = await call('/v1/models', { headers: { authorization: `Bearer ${jwt}`, 'x-api-key': `sk_${'Z'.repeat(32)}` } });
  t.is(invalidKey.status, 200);
  t.like((invalidKey.json as Echo).headers, { 'x-user-id': 'user_a', 'x-auth-method': 'jwt' });
  t.false('x-api-key' in (invalidKey.json as Echo).headers, 'the ignored key never goes upstream');
  const stale = await token({}, { sub: 'user_a', iat: nowS - 4000, exp: nowS - 100 });
  const keyOfA = edge.validator.add('user_a');
  const staleToken = await call('/v1/models', { headers: { authorization: `Bearer ${stale}`, 'x-api-key': keyOfA.key } });
  t.is(staleToken.status, 200);
  t.like((staleToken.json as Echo).headers, { 'x-user-id': 'user_a', 'x-auth-method': 'apikey' });
  const both = await call('/v1/models', { headers: { authorization: `Bearer ${stale}`, 'x-api-key': `sk_${'Z'.repeat(32)}` } });
  t.is(both.status, 401);
  t.like(both.json.error, { type: 'auth_error', code: 'unauthorized', message: 'Token expired; Invalid API key' });
  t.is(both.headers.get('www-authenticate'), 'Bearer error="invalid_token"');
  t.is(both.json.error.request_id, both.headers.get('x-request-id'));
  const key = edge.validator.add('user_b');
  const mixed = await call('/v1/models', { headers: { authorization: `Bearer ${jwt}`, 'x-api-key': key.key } });
  t.is(mixed.status, 401);
  const sameUser = edge.validator.add('user_a');
  t.is((await call('/v1/models', { headers: { authorization: `Bearer ${jwt}`, 'x-api-key': sameUser.key } })).status, 200);
});

test.serial('revoked key → 401 on the very next request (cache purged by the revocation message)', async (t) => {
  const key = edge.validator.add('user_revoked');
  t.is((await call('/v1/models', { headers: { 'x-api-key': key.key } })).status, 200);
  t.is((await call('/v1/models', { headers: { 'x-api-key': key.key } })).status, 200); // served from the cache
  edge.validator.remove(key.key);
  await edge.revocations.publish(sha256Hex(key.key));
  const res = await call('/v1/models', { headers: { 'x-api-key': key.key } });
  t.is(res.status, 401);
});

test.serial('spoofed X-User-ID: admin never reaches a service (with a credential, and on public routes)', async (t) => {
  const key = edge.validator.add('user_honest');
  const spoof = { 'x-user-id': 'admin', 'X-Auth-Method': 'jwt', 'x-user-email': 'root@x', 'x-gateway-token': 'forged' };
  const res = await call('/v1/models', { headers: { ...spoof, 'x-api-key': key.key } });
  t.like((res.json as Echo).headers, { 'x-user-id': 'user_honest', 'x-auth-method': 'apikey', 'x-gateway-token': GATEWAY_TOKEN });
  t.false('x-user-email' in (res.json as Echo).headers && (res.json as Echo).headers['x-user-email'] === 'root@x');
  const pub = await call('/llm/auth/guest-login', { method: 'POST', headers: spoof });
  t.is(pub.status, 200);
  const headers = (pub.json as Echo).headers;
  t.false('x-user-id' in headers);
  t.false('x-auth-method' in headers);
  t.false('x-user-email' in headers);
  t.is(headers['x-gateway-token'], GATEWAY_TOKEN);
  t.is((await call('/v1/models', { headers: spoof })).status, 401);
});

test.serial('public routes need no credential; the internal validator route is not exposed', async (t) => {
  t.is((await call('/.well-known/jwks.json')).status, 200);
  t.is((await call('/llm/auth/refresh', { method: 'POST' })).status, 200);
  const blocked = await call('/internal/auth/validate-api-key', { method: 'POST', headers: { 'x-api-key': edge.validator.add('u').key } });
  t.is(blocked.status, 404);
  t.is(blocked.json.error.type, 'not_found_error');
  const health = await call('/healthz');
  t.deepEqual(health.json, { status: 'ok', service: 'gateway' });
  const none = await call('/llmx/v1/models');
  t.is(none.status, 404);
});

test.serial('CORS: preflight answered without credentials; responses expose rate-limit and request-id headers', async (t) => {
  const before = edge.upstream.seen.length;
  const res = await fetch(`${edge.url}/v1/chat/completions`, {
    method: 'OPTIONS',
    headers: { origin: 'https://app.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization,content-type' },
  });
  t.is(res.status, 200);
  t.is(res.headers.get('access-control-allow-origin'), '*');
  for (const h of ['Authorization', 'X-API-Key', 'X-PROVIDER-DATA', 'Content-Type']) t.true(res.headers.get('access-control-allow-headers')!.includes(h));
  t.true(res.headers.get('access-control-allow-methods')!.includes('POST'));
  t.is(edge.upstream.seen.length, before);
  const actual = await fetch(`${edge.url}/v1/models`, { headers: { origin: 'https://app.example' } });
  t.is(actual.status, 401);
  t.is(actual.headers.get('access-control-allow-origin'), '*');
  const exposed = actual.headers.get('access-control-expose-headers')!;
  for (const h of ['X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset', 'Retry-After', 'X-Request-ID']) t.true(exposed.includes(h));
});

test.serial('X-Request-ID is kept when sane, X-Forwarded-For gets the socket peer appended', async (t) => {
  const key = edge.validator.add('user_fwd');
  const res = await call('/v1/models', { headers: { 'x-api-key': key.key, 'x-request-id': 'req-abc-123', 'x-forwarded-for': '203.0.113.9' } });
  t.is(res.headers.get('x-request-id'), 'req-abc-123');
  t.like((res.json as Echo).headers, { 'x-request-id': 'req-abc-123', 'x-forwarded-for': '203.0.113.9, 127.0.0.1', 'x-forwarded-proto': 'http' });
});

test.serial('SSE reaches the client chunk by chunk (no buffering)', async (t) => {
  const key = edge.validator.add('user_sse');
  const chunks: string[] = [];
  let gotChunk: (() => void) | null = null;
  const response = new Promise<number>((resolve, reject) => {
    const req = httpRequest(`${edge.url}/v1/stream`, { method: 'POST', headers: { 'x-api-key': key.key } }, (res) => {
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        chunks.push(chunk);
        gotChunk?.();
      });
      res.on('end', () => resolve(res.statusCode!));
    });
    req.on('error', reject);
    req.end();
  });
  const stream = await edge.upstream.nextStream();
  const next = () => new Promise<void>((resolve) => (gotChunk = resolve));
  for (let i = 0; i < 3; i++) {
    const arrived = next();
    stream.write(`data: {"n":${i}}\n\n`);
    await arrived; // the client has chunk i before the upstream writes chunk i+1
    t.is(chunks.at(-1), `data: {"n":${i}}\n\n`);
  }
  const arrived = next();
  stream.write('data: [DONE]\n\n');
  await arrived;
  stream.end();
  t.is(await response, 200);
  t.deepEqual(chunks, ['data: {"n":0}\n\n', 'data: {"n":1}\n\n', 'data: {"n":2}\n\n', 'data: [DONE]\n\n']);
});

test.serial('request bodies stream to the upstream unbuffered (first chunk arrives before the client finishes)', async (t) => {
  const key = edge.validator.add('user_upload');
  const done = new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = httpRequest(`${edge.url}/v1/upload`, { method: 'POST', headers: { 'x-api-key': key.key, 'content-type': 'application/octet-stream', 'transfer-encoding': 'chunked' } }, (res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode!, body }));
    });
    req.on('error', reject);
    const firstArrived = edge.upstream.nextBodyChunk();
    req.write('part-one;');
    // The client has not ended its request: the upstream already holds the first chunk.
    void firstArrived.then((chunk) => {
      t.is(chunk, 'part-one;');
      req.end('part-two');
    });
  });
  const result = await done;
  t.is(result.status, 200);
  t.is((JSON.parse(result.body) as Echo).body, 'part-one;part-two');
});

test.serial('an upstream that is down → 502 shape A', async (t) => {
  const down = await startEdgeWithFakes({ clock, vars: { DECK_RESPONSE_API_URL: 'http://127.0.0.1:9' } });
  try {
    const key = down.validator.add('user_down');
    const res = await fetch(`${down.url}/v1/responses`, { method: 'POST', headers: { 'x-api-key': key.key } });
    t.is(res.status, 502);
    t.like(((await res.json()) as { error: object }).error, { type: 'internal_error', code: 'upstream_error' });
  } finally {
    await down.close();
  }
});

test.serial('validator down → 503 at the edge, the request is not passed through', async (t) => {
  const key = edge.validator.add('user_vdown');
  edge.validator.setMode('error');
  try {
    const before = edge.upstream.seen.length;
    const res = await call('/v1/models', { headers: { 'x-api-key': key.key } });
    t.is(res.status, 503);
    t.is(res.json.error.code, 'service_unavailable');
    t.is(edge.upstream.seen.length, before);
  } finally {
    edge.validator.setMode('normal');
  }
});

test.serial('a Unicode name or e-mail travels encoded (RFC 8187 ext-value); a subject no header can carry is 401, never a 500', async (t) => {
  // Kong sends a plugin's header value as UTF-8 and Node reads headers as Latin-1; an external
  // issuer (Keycloak) may sign any Unicode name, so anything but printable ASCII is encoded.
  const named = await token({ preferred_username: '李雷', email: '用户@例子.test' }, { sub: 'user_cjk' });
  const res = await call('/v1/models', { headers: { authorization: `Bearer ${named}` } });
  t.is(res.status, 200);
  const headers = (res.json as Echo).headers;
  t.like(headers, { 'x-auth-method': 'jwt', 'x-user-id': 'user_cjk' });
  t.is(headers['x-user-username'], "UTF-8''%E6%9D%8E%E9%9B%B7");
  t.is(headers['x-user-email'], "UTF-8''%E7%94%A8%E6%88%B7%40%E4%BE%8B%E5%AD%90.test");
  const latin = await call('/v1/models', { headers: { authorization: `Bearer ${await token({ preferred_username: 'josé' }, { sub: 'user_latin' })}` } });
  t.is(latin.status, 200);
  t.is((latin.json as Echo).headers['x-user-username'], "UTF-8''jos%C3%A9");
  // Printable ASCII travels as it is.
  const ascii = await call('/v1/models', { headers: { authorization: `Bearer ${await token({ preferred_username: 'ada 100%' }, { sub: 'user_ascii' })}` } });
  t.is((ascii.json as Echo).headers['x-user-username'], 'ada 100%');
  const before = edge.upstream.seen.length;
  for (const sub of ['用户', 'user_a\r\nx-user-id: admin']) {
    const refused = await call('/v1/models', { headers: { authorization: `Bearer ${await token({}, { sub })}` } });
    t.is(refused.status, 401, sub);
    t.like(refused.json.error, { type: 'auth_error', code: 'unauthorized' });
  }
  t.is(edge.upstream.seen.length, before);
});

test.serial('a Connection header naming an identity header is refused at the edge (Kong would drop those headers after the plugins)', async (t) => {
  const key = edge.validator.add('user_conn');
  const before = edge.upstream.seen.length;
  const answer = await new Promise<{ status: number; body: string; requestId: string | undefined }>((resolve, reject) => {
    const req = httpRequest(`${edge.url}/v1/chat/completions`, { method: 'POST', headers: { 'x-api-key': key.key, connection: 'keep-alive, X-User-Key-Id', 'content-type': 'application/json' } }, (res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode!, body, requestId: res.headers['x-request-id'] as string | undefined }));
    });
    req.on('error', reject);
    req.end('{"model":"m"}');
  });
  t.is(answer.status, 400);
  const error = (JSON.parse(answer.body) as { error: Record<string, unknown> }).error;
  t.like(error, { type: 'invalid_request_error', code: 'invalid_parameter', param: 'Connection', request_id: answer.requestId });
  t.is(edge.upstream.seen.length, before);
});

test.serial('a header the request\'s Connection header names stays on that hop: the service never sees it', async (t) => {
  const key = edge.validator.add('user_hop', 'pro');
  const echo = await new Promise<Echo>((resolve, reject) => {
    const headers = { 'x-api-key': key.key, connection: 'keep-alive, X-Custom-Hop', 'x-custom-hop': 'for the next hop only', 'x-kept': 'end to end' };
    const req = httpRequest(`${edge.url}/v1/models`, { headers }, (res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => (res.statusCode === 200 ? resolve(JSON.parse(body) as Echo) : reject(new Error(`status ${res.statusCode}: ${body}`))));
    });
    req.on('error', reject);
    req.end();
  });
  t.is(echo.headers['x-kept'], 'end to end');
  t.false('x-custom-hop' in echo.headers);
  t.false('connection' in echo.headers && /x-custom-hop/i.test(echo.headers.connection));
  t.is(echo.headers['x-user-id'], 'user_hop');
});
