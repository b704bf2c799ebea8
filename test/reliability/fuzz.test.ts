import type { RequestListener } from 'node:http';
import test, { type ExecutionContext } from 'ava';
import fc from 'fast-check';
import { z } from 'zod';
import { ROUTE_TABLE, type Route } from '../../services/kit/index.js';
import { GATEWAY_TOKEN_HEADER, IDENTITY_HEADERS } from '../../services/kit/index.js';
import { edgeCall } from '../helpers/edge-call.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';
import { reliabilityFigures } from '../helpers/reliability-figures.js';

/**
 * Property-based fuzzing of every JSON endpoint of every service, through the edge and directly to
 * each service (gateway token and the edge's identity headers; internal routes with the token
 * alone, as other services call them). The endpoints
 * are the route tables the running services mounted (so a new route is fuzzed by being declared);
 * for each, FUZZ_RUNS generated bodies (POST/PUT/PATCH) or query strings (GET): the route's own
 * fields with hostile values (NUL, lone surrogates, huge and negative numbers, wrong types, deep
 * nesting, prototype-pollution keys), plus whole hostile bodies. Seeded: FUZZ_SEED reproduces a run.
 * Whatever is sent, no answer is a 5xx, and every 4xx is the platform's error body
 * `{"error":{"type","code","message","param","request_id"}}` (a JSON-RPC error object on /v1/mcp).
 */

// Per endpoint and per path (edge, direct): the default gives each endpoint 200 inputs in CI.
const RUNS = Number(process.env.FUZZ_RUNS ?? 100);
const SEED = Number(process.env.FUZZ_SEED ?? 20261123);
const CONCURRENCY = Number(process.env.FUZZ_CONCURRENCY ?? 8);
const ADMIN_KEY = 'sk_' + 'Fuzz1ngSu1te'.padEnd(32, 'q');

interface Target {
  service: string;
  method: Route['method'];
  path: string;
  fields: string[];
  queryFields: string[];
  /** Service-to-service routes: fuzzed only directly (the edge has no route to them). */
  internal: boolean;
}

/** The top-level fields of a schema (objects, possibly refined, optional or transformed). */
function fieldsOf(schema: unknown): string[] {
  let current = schema;
  for (let i = 0; i < 6 && current; i++) {
    if (current instanceof z.ZodObject) return Object.keys(current.shape);
    const def = (current as { def?: { type?: string; in?: unknown; innerType?: unknown } }).def;
    current = def?.type === 'pipe' ? def.in : def?.innerType;
  }
  return [];
}

interface Layer {
  handle?: { stack?: Layer[] } & Record<symbol, unknown>;
}

function mountedTables(app: { router: { stack: Layer[] } }): Route[] {
  const out: Route[] = [];
  const walk = (stack: Layer[]) => {
    for (const layer of stack) {
      const table = layer.handle?.[ROUTE_TABLE] as { routes: Route[] } | undefined;
      if (table) out.push(...table.routes);
      else if (layer.handle?.stack) walk(layer.handle.stack);
    }
  };
  walk(app.router.stack);
  return out;
}

// Raw JSON texts (not JS values): numbers JSON.stringify could never produce, escapes as sent on the wire.
const RAW_HOSTILE = [
  '"a\\u0000b"', '"\\ud800"', '"\\udfffx"', '"\\u0000"', '1e400', '-1e400', '1180591620717411303424',
  '-9223372036854775809', '9007199254740993', '1.5', '-1', '0', 'true', 'null', '[]', '{}', '""',
  '{"__proto__":{"is_admin":true}}', '{"constructor":{"prototype":{"is_admin":true}}}',
  JSON.stringify('x'.repeat(20_000)), '"2026-13-45T99:99:99Z"', '"http://127.0.0.1/"', '"../../etc/passwd"',
];
const deep = (n: number) => '['.repeat(n) + ']'.repeat(n);
const deepObject = (n: number) => '{"a":'.repeat(n) + '1' + '}'.repeat(n);

const valueText: fc.Arbitrary<string> = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom(...RAW_HOSTILE) },
  { weight: 3, arbitrary: fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v) ?? 'null') },
  { weight: 3, arbitrary: fc.string({ unit: 'binary', maxLength: 40 }).map((s) => JSON.stringify(s)) },
  { weight: 2, arbitrary: fc.oneof(fc.bigInt(), fc.double()).map((n) => (typeof n === 'bigint' ? n.toString() : Number.isFinite(n) ? String(n) : '1e999')) },
  { weight: 1, arbitrary: fc.integer({ min: 30, max: 200 }).map(deep) },
  { weight: 1, arbitrary: fc.integer({ min: 30, max: 200 }).map(deepObject) },
);
const keyText = (fields: string[]) =>
  fc.oneof(
    { weight: 6, arbitrary: fields.length ? fc.constantFrom(...fields) : fc.constant('x') },
    { weight: 1, arbitrary: fc.constantFrom('__proto__', 'constructor', 'prototype', 'a\u0000b', '\ud800') },
    { weight: 1, arbitrary: fc.string({ unit: 'binary', maxLength: 12 }) },
  );

/** A body: the route's fields (some hostile, some nested one level), or a whole hostile body. */
const bodyText = (fields: string[]): fc.Arbitrary<string> =>
  fc.oneof(
    { weight: 8, arbitrary: fc.array(fc.tuple(keyText(fields), fc.oneof(valueText, fc.dictionary(keyText(fields), valueText, { maxKeys: 3 }).map((d) => `{${Object.entries(d).map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(',')}}`))), { maxLength: 6 }).map((entries) => `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${v}`).join(',')}}`) },
    { weight: 1, arbitrary: fc.constantFrom(deep(5000), deepObject(5000), '[1,2,3]', '"\\u0000"', 'null', '{"a":1,"a":2}', '{', '') },
    { weight: 1, arbitrary: valueText },
  );

const queryText = (fields: string[]): fc.Arbitrary<string> =>
  fc
    .array(
      fc.tuple(
        fc.oneof({ weight: 5, arbitrary: fields.length ? fc.constantFrom(...fields, 'limit', 'after', 'order') : fc.constantFrom('limit', 'after', 'order') }, { weight: 1, arbitrary: fc.constantFrom('__proto__', 'constructor', 'a[b][c]', 'limit[]') }),
        fc.oneof(fc.constantFrom('%00', '%ED%A0%80', '%C0%80', '1e400', '-1', '99999999999999999999', 'NaN', '', '%E0%A4', 'a'.repeat(5000)), fc.string({ maxLength: 20 }).map(encodeURIComponent), fc.integer().map(String)),
      ),
      { minLength: 1, maxLength: 4 },
    )
    .map((pairs) => pairs.map(([k, v]) => `${k}=${v}`).join('&'));

async function inParallel<T>(items: T[], width: number, run: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(width, items.length) }, async () => {
    while (next < items.length) await run(items[next++]!);
  }));
}

let p: TestPlatform;
let bearer: string;
let adminId: string;
let guestId: string;
const ids: Record<string, string> = {};
const targets: Target[] = [];

const accept = (path: string): Record<string, string> => (path.includes('/mcp') ? { accept: 'application/json, text/event-stream' } : {});

const call = (method: string, path: string, options: { body?: string; bearer?: boolean } = {}) =>
  edgeCall(p.url, method, path, { body: options.body, ...(options.bearer ? { bearer } : { apiKey: ADMIN_KEY }), headers: accept(path) });

/** Straight to the service, as the edge would call it: the gateway token and the caller's identity (none for internal routes). */
const callDirect = (target: Target, method: string, path: string, options: { body?: string; bearer?: boolean } = {}) => {
  const headers: Record<string, string> = { [GATEWAY_TOKEN_HEADER]: p.gatewaySecret, ...accept(path) };
  if (!target.internal) {
    headers[IDENTITY_HEADERS.authMethod] = 'jwt';
    headers[IDENTITY_HEADERS.userId] = options.bearer ? guestId : adminId;
    headers[IDENTITY_HEADERS.subject] = options.bearer ? guestId : adminId;
  }
  return edgeCall(p.serviceUrl(target.service), method, path, { body: options.body, headers });
};

test.before(async () => {
  p = await startTestPlatform({ env: { BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY } });
  bearer = (await call('post', '/auth/guest-login')).json.access_token;
  adminId = (await call('get', '/auth/me')).json.id;
  guestId = (await call('get', '/auth/me', { bearer: true })).json.id;
  const conversation = await call('post', '/v1/conversations', { body: JSON.stringify({ items: [{ role: 'user', content: 'hi' }] }) });
  ids.conversationId = conversation.json.id;
  ids.itemId = (await call('get', `/v1/conversations/${ids.conversationId}/items`)).json.data[0].id;
  ids.branch = 'MAIN';
  ids.projectId = (await call('post', '/v1/projects', { body: JSON.stringify({ name: 'fuzz' }) })).json.id;
  for (const started of p.platform.started) {
    if (started.name === 'gateway') continue;
    const app = started.server.server.listeners('request')[0] as RequestListener & { router: { stack: Layer[] } };
    for (const route of mountedTables(app)) {
      if (route.body === 'stream' || route.method === 'delete') continue;
      // Static pages (the web console) are not JSON endpoints.
      const contentType = (route.response as { contentType?: string } | undefined)?.contentType;
      if (contentType && !contentType.includes('json')) continue;
      // Signed URLs carry their own credential (an HMAC in the query); fuzzing them only tests the signature check.
      if (route.path.includes('/signed/')) continue;
      targets.push({ service: started.name, method: route.method, path: route.path, fields: fieldsOf(route.request?.body), queryFields: fieldsOf(route.request?.query), internal: route.access === 'internal' });
    }
  }
});
const figures = reliabilityFigures('fuzz');
test.after.always(async () => {
  figures.write();
  await p?.stop();
});

/** The family an endpoint belongs to in the figures: service and resource (`/v1/conversations`, `/v1/admin`, `/auth`). */
const familyOf = (target: Target) => {
  const segments = target.path.split('/');
  return `${target.service} ${segments[1] === 'v1' ? `/v1/${segments[2]}` : `/${segments[1]}`}`;
};

const pathWith = (path: string) => path.replace(/[:*]([A-Za-z_]+)/g, (_m, name: string) => encodeURIComponent(ids[name] ?? `${name}_unknown`));

/** The platform's error body; on the MCP endpoint a JSON-RPC error object also counts. */
function wellFormed(path: string, json: any): boolean {
  const e = json?.error;
  if (e && typeof e.type === 'string' && typeof e.code === 'string' && typeof e.message === 'string' && 'param' in e && typeof e.request_id === 'string') return true;
  if (/\/mcp(\/|$)/.test(path) && json?.jsonrpc === '2.0' && typeof e?.code === 'number' && typeof e?.message === 'string') return true;
  return false;
}

async function fuzz(t: ExecutionContext, via: 'edge' | 'direct'): Promise<void> {
  t.timeout(600_000);
  const chosen = via === 'edge' ? targets.filter((target) => !target.internal) : targets;
  t.true(chosen.length > 30, `found ${chosen.length} endpoints`);
  const findings: string[] = [];
  const rows = new Map<string, { endpoints: number; inputs: number; accepted: number; fivexx: number; malformed4xx: number }>();
  for (const [index, target] of chosen.entries()) {
    const row = rows.get(target.service) ?? { endpoints: 0, inputs: 0, accepted: 0, fivexx: 0, malformed4xx: 0 };
    rows.set(target.service, row);
    row.endpoints++;
    const isGet = target.method === 'get';
    const inputs = fc.sample(isGet ? queryText(target.queryFields) : bodyText(target.fields), { numRuns: RUNS, seed: SEED + index });
    const path = pathWith(target.path);
    const figureRow = figures.row(via === 'edge' ? 'fuzz through the edge' : 'fuzz direct to each service');
    const family = familyOf(target);
    // A few requests in flight at once: latency here is the database and the loopback, not CPU.
    await inParallel(inputs, CONCURRENCY, async (input) => {
      const send = via === 'edge' ? call : (method: string, to: string, options: { body?: string; bearer?: boolean }) => callDirect(target, method, to, options);
      const reply = isGet ? await send('get', `${path}?${input}`, { bearer: path.startsWith('/auth/') }) : await send(target.method, path, { body: input, bearer: path.startsWith('/auth/') });
      row.inputs++;
      figureRow.requestsChecked++;
      figureRow.badInputs[family] = (figureRow.badInputs[family] ?? 0) + 1;
      if (reply.status >= 500) figureRow.fiveXx++;
      if (reply.status < 400) row.accepted++;
      const where = `${target.method.toUpperCase()} ${target.path} ${isGet ? '?' + input.slice(0, 120) : input.slice(0, 160)}`;
      if (reply.status >= 500) {
        row.fivexx++;
        findings.push(`${reply.status} ${where} → ${reply.text.slice(0, 200)}`);
      } else if (reply.status >= 400 && !wellFormed(target.path, reply.json)) {
        row.malformed4xx++;
        findings.push(`${reply.status} not in the error shape: ${where} → ${reply.text.slice(0, 200)}`);
      }
    });
  }
  const lines = ['service        endpoints  inputs  2xx/3xx  5xx  4xx-not-shaped', ...[...rows].map(([name, r]) => `${name.padEnd(14)} ${String(r.endpoints).padStart(9)} ${String(r.inputs).padStart(7)} ${String(r.accepted).padStart(8)} ${String(r.fivexx).padStart(4)} ${String(r.malformed4xx).padStart(15)}`)];
  const total = [...rows.values()].reduce((a, r) => ({ endpoints: a.endpoints + r.endpoints, inputs: a.inputs + r.inputs, fivexx: a.fivexx + r.fivexx }), { endpoints: 0, inputs: 0, fivexx: 0 });
  lines.push(`total          ${String(total.endpoints).padStart(9)} ${String(total.inputs).padStart(7)}          ${String(total.fivexx).padStart(4)}   (FUZZ_RUNS=${RUNS}, FUZZ_SEED=${SEED})`);
  t.log(`${via}\n` + lines.join('\n'));
  t.deepEqual(findings.slice(0, 40), [], `${findings.length} findings`);
  t.is(total.inputs, chosen.length * RUNS);
}

test('fuzzed bodies and queries through the edge on every JSON endpoint: no 5xx, every 4xx in the error shape', (t) => fuzz(t, 'edge'));
test('fuzzed bodies and queries sent directly to each service (internal routes included): no 5xx, every 4xx in the error shape', (t) => fuzz(t, 'direct'));
