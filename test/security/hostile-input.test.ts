import test from 'ava';
import { z } from 'zod';
import type { Route } from '../../services/kit/index.js';
import { llmApiService } from '../../services/llm-api/service.js';
import { edgeCall } from '../helpers/edge-call.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.js';

/**
 * The attack class "hostile input" against every JSON endpoint of llm-api, through the edge: NUL
 * characters and unpaired surrogates in every field and in every id of the path, JSON nested far
 * too deep, prototype-pollution keys, numbers no column can hold, wrong types, and hostile query
 * strings. Whatever the route, the answer is never a 5xx, and every refusal is the platform's error
 * body `{"error":{"type","code","message","param","request_id"}}`.
 *
 * The endpoints come from llm-api's route table (`routes(deps)` of every resource), so a new route
 * joins the suite by being declared. Internal routes are not reachable through the edge.
 */

const ADMIN_KEY = 'sk_' + 'S3cur1tySu1te'.padEnd(32, 'x');

interface Target {
  method: Route['method'];
  path: string;
  fields: string[];
  bearer: boolean;
}

/** The top-level fields of a body schema (objects, possibly refined or transformed). */
function fieldsOf(schema: z.ZodType | undefined): string[] {
  let current: unknown = schema;
  for (let i = 0; i < 5 && current; i++) {
    if (current instanceof z.ZodObject) return Object.keys(current.shape);
    const def = (current as { def?: { type?: string; in?: unknown; innerType?: unknown } }).def;
    current = def?.type === 'pipe' ? def.in : def?.innerType;
  }
  return [];
}

function targets(): Target[] {
  const table = llmApiService.routeTable!();
  // The caller's own keys and profile are managed with a bearer token; everything else with the admin key.
  return table
    .filter((r) => r.access !== 'internal' && r.body !== 'stream')
    .map((r) => ({ method: r.method, path: r.path, fields: fieldsOf(r.request?.body as z.ZodType | undefined), bearer: r.path.startsWith('/auth/') }));
}

let p: TestPlatform;
// A provider that answers (on loopback, allowed): its sync succeeds whatever hostile body the sync route is sent.
let provider: FakeUpstream;
let bearer: string;
const ids: Record<string, string> = {};

const call = (method: string, path: string, options: { body?: string; bearer?: boolean } = {}) =>
  edgeCall(p.url, method, path, { body: options.body, ...(options.bearer ? { bearer } : { apiKey: ADMIN_KEY }) });

test.before(async () => {
  provider = await startFakeUpstream({ name: 'suite' });
  p = await startTestPlatform({ env: { BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY, PROVIDER_URL_ALLOW: '127.0.0.1' } });
  bearer = (await call('post', '/auth/guest-login')).json.access_token;
  const upgraded = await call('post', '/auth/upgrade', { bearer: true, body: JSON.stringify({ email: 'suite@example.com' }) });
  if (upgraded.json?.access_token) bearer = upgraded.json.access_token;
  // Real ids, so that hostile bodies get past "not found" and reach the domain and the database.
  const conversation = await call('post', '/v1/conversations', { body: JSON.stringify({ items: [{ role: 'user', content: 'hi' }] }) });
  ids.conversationId = conversation.json.id;
  ids.itemId = (await call('get', `/v1/conversations/${ids.conversationId}/items`)).json.data[0].id;
  ids.branch = 'MAIN';
  ids.projectId = (await call('post', '/v1/projects', { body: JSON.stringify({ name: 'suite' }) })).json.id;
  ids.providerId = (await call('post', '/v1/admin/providers', { body: JSON.stringify({ name: 'suite', vendor: 'fake', base_url: provider.url }) })).json.id;
  if (!ids.providerId) throw new Error('the suite provider was not registered');
  const webhook = await call('post', '/v1/admin/webhooks', { body: JSON.stringify({ url: 'https://192.0.2.1/hook', events: ['conversation.created'] }) });
  if (webhook.json?.id) ids.webhook_id = webhook.json.id;
  const key = await call('post', '/auth/api-keys', { bearer: true, body: '{}' });
  ids.id = key.json?.id ?? 'key_unknown';
});
test.after.always(async () => {
  await p?.stop();
  await provider?.close();
});

/** The path with its parameters filled: known ids where the suite made one, else `fill`. */
function pathWith(path: string, fill?: string): string {
  return path.replace(/[:*]([A-Za-z_]+)/g, (_m, name: string) => fill ?? encodeURIComponent(ids[name] ?? `${name}_unknown`));
}

const HOSTILE_STRINGS: Array<[string, string]> = [
  ['NUL', '"a\\u0000b"'],
  ['lone high surrogate', '"x\\ud800"'],
  ['lone low surrogate', '"\\udfffx"'],
];
const HOSTILE_VALUES: Array<[string, string]> = [
  ...HOSTILE_STRINGS,
  ['1e400', '1e400'],
  ['-1e400', '-1e400'],
  ['2^70', '1180591620717411303424'],
  ['-2^63-1', '-9223372036854775809'],
  ['float for an integer', '1.5'],
  ['object', '{"a":"\\u0000"}'],
  ['array', '["\\ud800", 1e400]'],
  ['long string', JSON.stringify('x'.repeat(20_000))],
];
const deep = (n: number) => '{"a":' + '['.repeat(n) + ']'.repeat(n) + '}';
const WHOLE_BODIES: Array<[string, string]> = [
  ['5000 levels of nesting', deep(5000)],
  ['65 levels of nesting', deep(64)],
  ['__proto__ key', '{"__proto__":{"isAdmin":true,"is_admin":true}}'],
  ['constructor.prototype', '{"constructor":{"prototype":{"isAdmin":true}}}'],
  ['NUL in a key', '{"a\\u0000":"x"}'],
  ['top-level array', '[1,2,3]'],
  ['top-level string with NUL', '"\\u0000"'],
];

interface Finding {
  request: string;
  status: number;
  body: string;
}

/** A 5xx, or a 4xx that is not the platform's error body, is a finding. */
function check(findings: Finding[], request: string, reply: { status: number; json: any; text: string }) {
  const error = reply.json?.error;
  const shaped = error && typeof error.type === 'string' && typeof error.code === 'string' && typeof error.message === 'string' && 'param' in error && typeof error.request_id === 'string';
  if (reply.status >= 500 || (reply.status >= 400 && !shaped)) findings.push({ request, status: reply.status, body: reply.text.slice(0, 300) });
}

test('every JSON body field: hostile strings, numbers and types never give a 5xx; refusals are error bodies', async (t) => {
  t.timeout(300_000);
  const findings: Finding[] = [];
  let requests = 0;
  for (const target of targets()) {
    if (target.method === 'get' || target.method === 'delete') continue;
    const path = pathWith(target.path);
    for (const field of target.fields) {
      for (const [what, value] of HOSTILE_VALUES) {
        const body = `{${JSON.stringify(field)}:${value}}`;
        check(findings, `${target.method} ${target.path} ${field}=${what}`, await call(target.method, path, { body, bearer: target.bearer }));
        requests++;
      }
      // Nested: the same strings one level down (metadata values, limits, item content).
      for (const [what, value] of HOSTILE_STRINGS) {
        const body = `{${JSON.stringify(field)}:{"k":${value},"items":[{"content":${value}}]}}`;
        check(findings, `${target.method} ${target.path} ${field}.k=${what}`, await call(target.method, path, { body, bearer: target.bearer }));
        requests++;
      }
    }
    for (const [what, body] of WHOLE_BODIES) {
      check(findings, `${target.method} ${target.path} ${what}`, await call(target.method, path, { body, bearer: target.bearer }));
      requests++;
    }
  }
  t.log(`${requests} hostile bodies sent`);
  t.deepEqual(findings, []);
  t.true(requests > 500);
});

test('known NUL and surrogate cases are refused with 400 naming the field', async (t) => {
  const cases: Array<[string, string, string, string]> = [
    ['post', '/v1/conversations', '{"title":"a\\u0000"}', 'title'],
    ['post', '/v1/conversations', '{"metadata":{"k":"\\ud800"}}', 'metadata.k'],
    ['post', `/v1/conversations/${ids.conversationId}/items`, '{"items":[{"role":"user","content":"\\u0000"}]}', 'items[0].content'],
    ['post', '/v1/projects', '{"name":"ok","instruction":"\\udc00"}', 'instruction'],
    ['patch', `/v1/admin/providers/${ids.providerId}`, '{"name":"\\u0000"}', 'name'],
    ['post', '/v1/chat/completions', '{"model":"m","messages":[{"role":"user","content":"\\u0000"}]}', 'messages[0].content'],
    ['post', '/v1/chat/completions', deep(5000), 'body'],
  ];
  for (const [method, path, body, param] of cases) {
    const reply = await call(method, path, { body });
    t.is(reply.status, 400, `${method} ${path}: ${reply.text}`);
    t.is(reply.json.error.param, param, `${method} ${path}`);
  }
});

test('every id in a path and hostile query strings: never a 5xx; refusals are error bodies', async (t) => {
  t.timeout(120_000);
  const findings: Finding[] = [];
  const fills = ['%00', 'conv_%00', '%ED%A0%80', '%E0%A4', '%C0%80', 'a%2500b', '..%2F..%2Finternal', 'x'.repeat(5000)];
  for (const target of targets()) {
    if (!/[:*]/.test(target.path)) continue;
    for (const fill of fills) {
      const body = target.method === 'get' || target.method === 'delete' ? undefined : '{}';
      check(findings, `${target.method} ${target.path} id=${fill.slice(0, 20)}`, await call(target.method, pathWith(target.path, fill), { body, bearer: target.bearer }));
    }
  }
  const queries = ['limit=1e400', 'limit=%00', 'offset=99999999999999999999', 'offset=-1', 'after=%00', 'after=%ED%A0%80', 'order=%00', 'project_id=%00', 'limit[]=1&limit[]=2', 'a[b][c][d][e][f][g]=%00'];
  for (const target of targets()) {
    if (target.method !== 'get') continue;
    for (const query of queries) {
      check(findings, `get ${target.path}?${query}`, await call('get', `${pathWith(target.path)}?${query}`, { bearer: target.bearer }));
    }
  }
  t.deepEqual(findings, []);
});
