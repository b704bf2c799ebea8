import test from 'ava';
import { randomBase62 } from '../../services/kit/secrets.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';

// The attack class: reach a route the edge means to keep away (internal, admin) by spelling its
// path differently: letter case, percent-encoding, doubled slashes, dot segments, trailing slashes,
// the /llm alias. Every family is tried through the embedded edge on deck/kong.yaml with a real
// non-admin caller (a guest token and a key) and with no credential. Nothing may answer 200, the
// internal key validator may never disclose the owner of a key, and the internal turn append may
// never write to a conversation.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
let p: TestPlatform;
let guestToken: string;
let victimKey: string;
let victimId: string;

test.before(async () => {
  p = await startTestPlatform({ env: { BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY } });
  const login = await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' });
  guestToken = ((await login.json()) as { access_token: string }).access_token;
  const victim = (await (await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' })).json()) as { user_id: string };
  victimId = victim.user_id;
  const created = await fetch(`${p.url}/v1/admin/api-keys`, {
    method: 'POST',
    headers: { 'x-api-key': ADMIN_KEY, 'content-type': 'application/json' },
    body: JSON.stringify({ user_id: victimId, name: 'victim', tier: 'free' }),
  });
  victimKey = ((await created.json()) as { key: string }).key;
});
test.after.always(async () => {
  await p?.stop();
});

/** Spellings of one path that a case-insensitive or lenient router might take for it. */
function variants(path: string): string[] {
  const segments = path.split('/').filter(Boolean);
  const first = segments[0]!;
  const encodeFirstLetter = (s: string) => `%${s.charCodeAt(0).toString(16)}${s.slice(1)}`;
  const encodeFirstLetterUpper = (s: string) => `%${s.charCodeAt(0).toString(16).toUpperCase()}${s.slice(1)}`;
  const rest = segments.slice(1).join('/');
  const join = (head: string, tail = rest) => `/${head}${tail ? `/${tail}` : ''}`;
  return [
    path,
    path.toUpperCase(),
    join(first.toUpperCase()),
    join(first[0]!.toUpperCase() + first.slice(1)),
    path.replace(/[a-z](?=[^/]*$)/, (c) => c.toUpperCase()),
    join(encodeFirstLetter(first)),
    join(encodeFirstLetterUpper(first)),
    `/${segments.map(encodeFirstLetter).join('/')}`,
    `/${path}`,
    path.replace(/\//g, '//'),
    `${path}/`,
    `/x/..${path}`,
    `/.${path}`,
    `/v1/..${path}`,
    path.replace(/\/(?=[^/]*$)/, '/%2F'),
    path.replace(/\/(?=[^/]*$)/, '%2F'),
    path.replace(/\/(?=[^/]*$)/, '%2f'),
    `/llm${path}`,
    `/LLM${path.toUpperCase()}`,
    `${path}%00`,
    `${path};x`,
    `${path}?x=1`,
  ];
}

async function raw(method: string, path: string, headers: Record<string, string>, body?: string) {
  // fetch would normalise the path (dot segments); the edge must see exactly these bytes.
  const { request } = await import('node:http');
  return new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = request(`${p.url}/`, { method, path, headers: { ...headers, ...(body ? { 'content-type': 'application/json' } : {}) } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

const CALLERS: Array<[string, Record<string, string>]> = [
  ['no credential', {}],
  ['guest token', {}],
  ['key', {}],
];

function callerHeaders(name: string): Record<string, string> {
  if (name === 'guest token') return { authorization: `Bearer ${guestToken}` };
  if (name === 'key') return { 'x-api-key': victimKey };
  return {};
}

test('the internal key validator is unreachable through the edge in every spelling, and never discloses a key owner', async (t) => {
  const body = JSON.stringify({ api_key: victimKey });
  for (const path of [...variants('/internal/auth/validate-api-key'), ...variants('/auth/validate-api-key'), '/llm/auth/validate-api-key']) {
    for (const [caller] of CALLERS) {
      const res = await raw('POST', path, { ...callerHeaders(caller), 'x-api-key': victimKey }, body);
      t.not(res.status, 200, `${caller}: POST ${path} answered 200`);
      t.false(res.body.includes(victimId), `${caller}: POST ${path} disclosed the key owner`);
      t.true(res.status >= 400 && res.status < 500, `${caller}: POST ${path} → ${res.status}`);
    }
  }
});

test("the internal turn append (response-api's) is unreachable through the edge in every spelling: nothing is written", async (t) => {
  const created = await fetch(`${p.url}/v1/conversations`, { method: 'POST', headers: { 'x-api-key': victimKey, 'content-type': 'application/json' }, body: '{}' });
  const conversation = ((await created.json()) as { id: string }).id;
  const body = JSON.stringify({ user_id: victimId, items: [{ type: 'message', role: 'user', content: 'smuggled' }] });
  for (const path of variants(`/internal/conversations/${conversation}/items`)) {
    for (const [caller] of CALLERS) {
      const res = await raw('POST', path, callerHeaders(caller), body);
      t.true(res.status >= 400 && res.status < 500, `${caller}: POST ${path} → ${res.status}`);
    }
  }
  const items = await fetch(`${p.url}/v1/conversations/${conversation}/items`, { headers: { 'x-api-key': victimKey } });
  t.deepEqual(((await items.json()) as { data: unknown[] }).data, []);
});

test('admin route families refuse a non-admin in every spelling (never 200)', async (t) => {
  const families = ['/v1/admin/users', '/v1/admin/api-keys', '/v1/admin/providers', '/v1/admin/models/catalogs', '/v1/admin/webhooks', '/v1/admin/mcp/tools'];
  for (const family of families) {
    for (const path of variants(family)) {
      for (const [caller] of CALLERS) {
        const res = await raw('GET', path, callerHeaders(caller));
        t.not(res.status, 200, `${caller}: GET ${path} answered 200`);
        t.true(res.status >= 400 && res.status < 500, `${caller}: GET ${path} → ${res.status}`);
        if (caller === 'no credential' && res.status !== 404) t.is(res.status, 401, `GET ${path} without a credential`);
      }
    }
  }
});

test('user route families need a credential in every spelling: a variant is either refused or the same authenticated route', async (t) => {
  const families = ['/v1/models', '/v1/conversations', '/v1/projects', '/auth/me', '/auth/api-keys', '/v1/responses', '/v1/media/x', '/v1/mcp'];
  for (const family of families) {
    for (const path of variants(family)) {
      const res = await raw('GET', path, {});
      // Without a credential nothing but a refusal comes back: 401 when the variant matched a
      // protected route, 404 when it matched none (never the upstream's answer).
      t.true(res.status === 401 || res.status === 404 || res.status === 400, `GET ${path} without a credential → ${res.status}`);
    }
  }
});

test('spoofed edge identity headers never open an internal route, even on the service address', async (t) => {
  // Called directly on llm-api with the gateway token, as the edge would — but with identity
  // headers, which only requests that came through the public edge carry.
  const res = await fetch(`${p.serviceUrl('llm-api')}/internal/auth/validate-api-key`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-gateway-token': p.gatewaySecret, 'x-user-id': victimId, 'x-auth-method': 'jwt' },
    body: JSON.stringify({ api_key: victimKey }),
  });
  t.true(res.status === 403 || res.status === 404, `→ ${res.status}`);
  t.false((await res.text()).includes(victimId));
  // Without them (the edge's own validator call) it works.
  const edgeCall = await fetch(`${p.serviceUrl('llm-api')}/internal/auth/validate-api-key`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-gateway-token': p.gatewaySecret },
    body: JSON.stringify({ api_key: victimKey }),
  });
  t.is(edgeCall.status, 200);
});
