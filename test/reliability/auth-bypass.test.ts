import http from 'node:http';
import test from 'ava';
import { SignJWT } from 'jose';
import { randomBase62 } from '../../services/kit/index.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';
import { reliabilityFigures } from '../helpers/reliability-figures.js';
import { solidImage } from '../media/fixtures.js';
import { AUDIENCE, ISSUER, listenOn, newSigningKey, startFakeIssuer, unsignedToken } from '../plugins/fakes.js';

// Attempts to get past authentication or ownership, all through the edge (the embedded gateway
// reading deck/kong.yaml) with the platform trusting an external issuer whose JWKS this test
// serves. Each attempt must be refused; the figures count them per family. What the plugin unit
// tests check in isolation (test/plugins) is here checked end to end, against real services.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
const figures = reliabilityFigures('auth-bypass');
const row = figures.row('auth bypass attempts through the edge');
const tried = (family: string, n = 1) => {
  row.badInputs[family] = (row.badInputs[family] ?? 0) + n;
  row.requestsChecked += n;
};

let issuer: Awaited<ReturnType<typeof startFakeIssuer>>;
let p: TestPlatform;
const now = () => Math.floor(Date.now() / 1000);

test.before(async () => {
  issuer = await startFakeIssuer();
  p = await startTestPlatform({ env: { BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY, EDGE_JWKS_URL: issuer.url, JWT_ISSUER: ISSUER, JWT_AUDIENCE: AUDIENCE } });
});
test.after.always(async () => {
  figures.write();
  await p?.stop();
  await issuer?.close();
});

async function call(method: string, path: string, options: { token?: string; key?: string; body?: unknown; headers?: Record<string, string> } = {}) {
  const headers: Record<string, string> = { ...options.headers };
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  if (options.key) headers['x-api-key'] = options.key;
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`${p.url}${path}`, { method, headers, body: options.body === undefined ? undefined : JSON.stringify(options.body) });
  const text = await res.text();
  let body: any = null;
  try {
    body = JSON.parse(text);
  } catch {}
  return { status: res.status, body };
}

const tokenFor = (sub: string, extra: Parameters<typeof issuer.sign>[1] = {}) => issuer.sign({ email: `${sub}@example.test`, preferred_username: sub, email_verified: true }, { sub, ...extra });

test('forged tokens are refused: alg none, HS256 with the public key, injected jku/jwk/kid, expired, not yet valid, too long, wrong issuer or audience, disabled user', async (t) => {
  const good = await tokenFor('alice');
  const me = await call('GET', '/auth/me', { token: good });
  t.is(me.status, 200);

  const attacker = await newSigningKey('ES256', issuer.keys[0]!.kid);
  const attackerJwks = await listenOn((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: [attacker.jwk] })));
  t.teardown(() => attackerJwks.close());
  const claims = { sub: 'alice', iss: ISSUER, aud: AUDIENCE, iat: now(), exp: now() + 300 };
  const signedBy = (key: typeof attacker, header: Record<string, unknown>) => new SignJWT(claims).setProtectedHeader({ alg: key.alg, ...header }).sign(key.privateKey);
  const hmacWithPublicKey = await new SignJWT(claims)
    .setProtectedHeader({ alg: 'HS256', kid: issuer.keys[0]!.kid })
    .sign(new TextEncoder().encode(JSON.stringify(issuer.keys[0]!.jwk)));

  const forged: Record<string, string> = {
    'alg none': unsignedToken(claims),
    'HS256 signed with the public key': hmacWithPublicKey,
    'jku pointing at the attacker': await signedBy(attacker, { kid: 'attacker', jku: `${attackerJwks.url}/jwks.json` }),
    'jwk embedded in the header': await signedBy(attacker, { jwk: attacker.jwk }),
    'kid of a trusted key, attacker signature': await signedBy(attacker, { kid: issuer.keys[0]!.kid }),
    'kid path traversal': await signedBy(attacker, { kid: '../../../../dev/null' }),
    expired: await tokenFor('alice', { iat: now() - 1000, exp: now() - 600 }),
    'not yet valid': await tokenFor('alice', { iat: now() + 600, nbf: now() + 600, exp: now() + 900 }),
    'lifetime over 3600 s': await tokenFor('alice', { iat: now(), exp: now() + 7200 }),
    'wrong issuer': await tokenFor('alice', { iss: 'https://evil.test' }),
    'wrong audience': await tokenFor('alice', { aud: 'another-api' }),
  };
  for (const [what, token] of Object.entries(forged)) {
    const reply = await call('GET', '/auth/me', { token });
    t.is(reply.status, 401, what);
    t.like(reply.body, { error: { type: 'auth_error' } }, what);
  }
  tried('forged tokens', Object.keys(forged).length);

  // A disabled user's still-valid token is refused.
  const disabled = await call('PATCH', `/v1/admin/users/${me.body.id}`, { key: ADMIN_KEY, body: { disabled: true } });
  t.is(disabled.status, 200);
  const after = await call('GET', '/v1/conversations', { token: good });
  t.true([401, 403].includes(after.status), `disabled user: ${after.status}`);
  tried('forged tokens');
});

/** A raw request so that header names keep their case and may repeat (fetch would merge them). */
function rawGet(path: string, headers: Array<[string, string]>): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const url = new URL(p.url + path);
    const req = http.request({ host: url.hostname, port: url.port, path, method: 'GET', headers: [['Host', url.host], ...headers].flat() as unknown as http.OutgoingHttpHeaders }, (res) => {
      let text = '';
      res.on('data', (c) => (text += c)).on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text || 'null') }));
    });
    req.on('error', reject).end();
  });
}

test('forged identity headers, in any case and repeated, never change who the caller is', async (t) => {
  const bob = await tokenFor('bob');
  const bobId = (await call('GET', '/auth/me', { token: bob })).body.id as string;
  const adminId = (await call('GET', '/auth/me', { key: ADMIN_KEY })).body.id as string;
  const spoofs: Array<Array<[string, string]>> = [
    [['X-User-ID', adminId]],
    [['x-user-id', adminId]],
    [['X-USER-ID', adminId], ['x-User-Id', adminId]],
    [['X-User-ID', adminId], ['X-User-ID', bobId]],
    [['X-Auth-Method', 'apikey'], ['X-User-Key-ID', 'key_forged'], ['X-User-ID', adminId]],
    [['X-Gateway-Token', 'guess'], ['X-User-ID', adminId], ['X-User-Subject', adminId]],
    [['X-Consumer-ID', adminId], ['X-Authenticated-Userid', adminId], ['X-Credential-Identifier', adminId]],
  ];
  for (const spoof of spoofs) {
    const who = await rawGet('/auth/me', [['Authorization', `Bearer ${bob}`], ...spoof]);
    t.is(who.status, 200, `${JSON.stringify(spoof)} → ${JSON.stringify(who.body)}`);
    t.is(who.body.id, bobId, JSON.stringify(spoof));
    const admin = await rawGet('/v1/admin/users', [['Authorization', `Bearer ${bob}`], ...spoof]);
    t.is(admin.status, 403, JSON.stringify(spoof));
    const anonymous = await rawGet('/v1/conversations', spoof);
    t.is(anonymous.status, 401, JSON.stringify(spoof));
  }
  tried('forged identity headers', spoofs.length * 3);
});

test("another user's ids on every resource type answer 404; admin endpoints answer 403 to a normal user", async (t) => {
  const carol = await tokenFor('carol');
  const dave = await tokenFor('dave');
  const conversation = (await call('POST', '/v1/conversations', { token: carol, body: { items: [{ role: 'user', content: 'mine' }] } })).body;
  const itemId = (await call('GET', `/v1/conversations/${conversation.id}/items`, { token: carol })).body.data[0].id;
  const project = (await call('POST', '/v1/projects', { token: carol, body: { name: 'carol' } })).body;
  const key = (await call('POST', '/auth/api-keys', { token: carol, body: { name: 'carol' } })).body;
  const png = await solidImage('png', 5, 5, 9);
  const media = (await call('POST', '/v1/media/upload', { token: carol, body: { source: { type: 'base64', data: png.toString('base64') } } })).body;
  t.truthy(conversation.id && itemId && project.id && key.id && media.id);

  const foreign: Array<[string, string, unknown?]> = [
    ['GET', `/v1/conversations/${conversation.id}`],
    ['POST', `/v1/conversations/${conversation.id}`, { metadata: { x: 'y' } }],
    ['DELETE', `/v1/conversations/${conversation.id}`],
    ['GET', `/v1/conversations/${conversation.id}/items`],
    ['GET', `/v1/conversations/${conversation.id}/items/${itemId}`],
    ['POST', `/v1/conversations/${conversation.id}/items`, { items: [{ role: 'user', content: 'x' }] }],
    ['GET', `/v1/conversations/${conversation.id}/branches`],
    ['GET', `/v1/conversations/${conversation.id}/branches/MAIN`],
    ['GET', `/v1/projects/${project.id}`],
    ['PATCH', `/v1/projects/${project.id}`, { name: 'taken' }],
    ['DELETE', `/v1/projects/${project.id}`],
    ['DELETE', `/auth/api-keys/${key.id}`],
    ['GET', `/v1/media/${media.id}`],
    ['GET', `/v1/media/${media.id}/content`],
    ['DELETE', `/v1/media/${media.id}`],
    ['POST', '/v1/media/presigned-url', { media_id: media.id }],
    ['GET', '/v1/responses/resp_00000000000000000000000000'],
  ];
  for (const [method, path, body] of foreign) {
    const reply = await call(method, path, { token: dave, body });
    t.is(reply.status, 404, `${method} ${path}: ${JSON.stringify(reply.body)}`);
  }
  // Carol's things are intact.
  t.is((await call('GET', `/v1/conversations/${conversation.id}/items/${itemId}`, { token: carol })).status, 200);
  t.is((await call('GET', `/v1/media/${media.id}`, { token: carol })).status, 200);
  tried("another user's ids", foreign.length);

  const adminOnly: Array<[string, string, unknown?]> = [
    ['GET', '/v1/admin/users'],
    ['GET', '/v1/admin/providers'],
    ['POST', '/v1/admin/providers', { name: 'x', vendor: 'fake', base_url: 'http://127.0.0.1:1/v1' }],
    ['GET', '/v1/admin/api-keys'],
    ['GET', '/v1/admin/webhooks'],
    ['GET', '/v1/admin/usage'],
    ['GET', '/v1/admin/mcp/tools'],
  ];
  for (const [method, path, body] of adminOnly) {
    const reply = await call(method, path, { token: dave, body });
    t.is(reply.status, 403, `${method} ${path}: ${reply.status}`);
  }
  tried('admin endpoints as a normal user', adminOnly.length);
});

test('a revoked API key is refused; an API key cannot mint keys', async (t) => {
  const erin = await tokenFor('erin');
  const created = (await call('POST', '/auth/api-keys', { token: erin, body: { name: 'erin' } })).body;
  t.is((await call('GET', '/v1/models', { key: created.key })).status, 200);
  t.is((await call('POST', '/auth/api-keys', { key: created.key, body: { name: 'minted by a key' } })).status, 403);
  t.is((await call('POST', '/auth/api-keys', { token: created.key, body: { name: 'minted by a key' } })).status, 403);
  t.is((await call('DELETE', `/auth/api-keys/${created.id}`, { token: erin })).status, 200);
  const revoked = await call('GET', '/v1/models', { key: created.key });
  t.is(revoked.status, 401);
  t.like(revoked.body, { error: { type: 'auth_error' } });
  tried('API keys', 3);
});
