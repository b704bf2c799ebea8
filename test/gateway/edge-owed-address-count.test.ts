import test from 'ava';
import { ManualClock } from '../../services/kit/clock.js';
import { startEdgeWithFakes } from './edge-harness.js';

// The embedded edge moves the per-address count of a key it saw valid in the last minute from the
// rewrite phase to the access phase (one counter call with the tier's). Requests the edge answers
// before that phase (no route: 404; a path served for other methods: 405; a CORS preflight; a
// refusal by an earlier plugin; a route whose own limiter instance takes the access phase) must
// still count against their address, and be refused once it is over its limit, as they are
// without a key. Per-address limit: 5 a minute; tiers far out of the way. Each test has its own
// client address (127.0.0.1 is a trusted proxy) and its own key.
const T0 = Date.UTC(2026, 10, 22, 14, 0, 1);
const clock = new ManualClock(T0);
let edge: Awaited<ReturnType<typeof startEdgeWithFakes>>;

test.before(async () => {
  edge = await startEdgeWithFakes({
    clock,
    trustedProxies: ['127.0.0.1'],
    vars: {
      DECK_RATE_LIMIT_IP_PER_MINUTE: '5',
      DECK_RATE_LIMIT_FREE_PER_MINUTE: '1000',
      DECK_RATE_LIMIT_FREE_PER_DAY: '100000',
      DECK_GUEST_LOGIN_PER_HOUR: '1000',
      DECK_API_KEY_CACHE_TTL_SECONDS: '30',
    },
  });
});
test.after.always(async () => {
  await edge?.close();
});

let addresses = 0;
/** A client address and a free key the edge has seen valid from it (one request counted). */
async function knownKeyClient(t: import('ava').ExecutionContext) {
  clock.set(T0);
  const from = `198.51.100.${++addresses}`;
  const key = edge.validator.add(`user_owed_${addresses}`, 'free');
  const first = await send('GET', '/v1/models', { 'x-api-key': key.key, 'x-forwarded-for': from });
  t.is(first.status, 200);
  t.is(first.headers.get('x-ratelimit-remaining-minute'), '4');
  return { from, key };
}

async function send(method: string, path: string, headers: Record<string, string>) {
  const res = await fetch(`${edge.url}${path}`, { method, headers });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text ? (JSON.parse(text) as { error?: { code: string; message: string } }) : null };
}

/** Six more requests from the address: what is left of its five is answered as the edge answers them (`left`), the rest 429 from this address. */
async function sixMore(t: import('ava').ExecutionContext, method: string, path: string, headers: Record<string, string>, answered: number, left = 4) {
  const statuses: number[] = [];
  let last: Awaited<ReturnType<typeof send>> | undefined;
  for (let i = 0; i < 6; i++) {
    last = await send(method, path, headers);
    statuses.push(last.status);
  }
  t.deepEqual(statuses, Array.from({ length: 6 }, (_, i) => (i < left ? answered : 429)));
  t.like(last!.body?.error, { code: 'rate_limit_exceeded' });
  t.regex(last!.body!.error!.message, /5 requests per minute from this address/);
  t.truthy(last!.headers.get('retry-after'));
}

test.serial('no route matched (404): a known key counts against its address like any request', async (t) => {
  const { from, key } = await knownKeyClient(t);
  const first404 = await send('GET', '/nope', { 'x-api-key': key.key, 'x-forwarded-for': from });
  t.is(first404.status, 404);
  t.is(first404.headers.get('x-ratelimit-remaining-minute'), '3', 'the count and its headers, as the rewrite phase gives them');
  await sixMore(t, 'GET', '/nope', { 'x-api-key': key.key, 'x-forwarded-for': from }, 404, 3);
  t.is((await send('GET', '/nope', { 'x-forwarded-for': from })).status, 429, 'the same address without the key');
});

test.serial('a method the path is not served for (405): counted', async (t) => {
  const { from, key } = await knownKeyClient(t);
  const headers = { 'x-api-key': key.key, 'x-forwarded-for': from };
  const first = await send('POST', '/openapi.json', headers);
  t.is(first.status, 405);
  t.is(first.headers.get('allow'), 'GET, HEAD');
  const statuses: number[] = [];
  for (let i = 0; i < 4; i++) statuses.push((await send('POST', '/openapi.json', headers)).status);
  t.deepEqual(statuses, [405, 405, 405, 429]);
});

test.serial('a CORS preflight carrying a known key: counted', async (t) => {
  const { from, key } = await knownKeyClient(t);
  const preflight = { 'x-api-key': key.key, 'x-forwarded-for': from, origin: 'https://app.example', 'access-control-request-method': 'POST' };
  const answered = (await send('OPTIONS', '/v1/models', preflight)).status;
  t.true(answered < 300, `the preflight is answered by the edge (${answered})`);
  const statuses: number[] = [];
  for (let i = 0; i < 4; i++) statuses.push((await send('OPTIONS', '/v1/models', preflight)).status);
  t.deepEqual(statuses, [answered, answered, answered, 429]);
});

test.serial('a known key refused by the authentication plugins (gone from the validator, no revocation heard): counted', async (t) => {
  const { from, key } = await knownKeyClient(t);
  edge.validator.remove(key.key);
  clock.advance(31_000); // past the key cache's 30 s, within the minute the limiter remembers the key for
  await sixMore(t, 'GET', '/v1/models', { 'x-api-key': key.key, 'x-forwarded-for': from }, 401);
});

test.serial('a route with its own limiter instance (guest login): the global per-address count still holds', async (t) => {
  const { from, key } = await knownKeyClient(t);
  await sixMore(t, 'POST', '/llm/auth/guest-login', { 'x-api-key': key.key, 'x-forwarded-for': from }, 200);
});

test.serial('a known key on a proxied route: counted once, in the access phase', async (t) => {
  const { from, key } = await knownKeyClient(t);
  const remaining: Array<string | null> = [];
  for (let i = 0; i < 4; i++) remaining.push((await send('GET', '/v1/models', { 'x-api-key': key.key, 'x-forwarded-for': from })).headers.get('x-ratelimit-remaining-minute'));
  t.deepEqual(remaining, ['3', '2', '1', '0']);
  t.is((await send('GET', '/v1/models', { 'x-api-key': key.key, 'x-forwarded-for': from })).status, 429);
});

// A key the edge knows to be exempt (enterprise: never held to the per-address limit) skips the
// count only on requests it authenticates. Carried to a request the edge answers before the key is
// checked, or refused, it exempts nothing: the address is counted, and refused once over its limit.
async function knownExemptKeyClient(t: import('ava').ExecutionContext) {
  clock.set(T0);
  const from = `198.51.100.${++addresses}`;
  const key = edge.validator.add(`user_owed_ent_${addresses}`, 'enterprise');
  const first = await send('GET', '/v1/models', { 'x-api-key': key.key, 'x-forwarded-for': from });
  t.is(first.status, 200);
  t.is(first.headers.get('x-ratelimit-remaining-minute'), '4', 'not known yet: counted before the key is checked');
  const second = await send('GET', '/v1/models', { 'x-api-key': key.key, 'x-forwarded-for': from });
  t.is(second.status, 200);
  t.is(second.headers.get('x-ratelimit-remaining-minute'), null, 'known exempt and authenticating the request: not counted');
  return { from, key };
}

test.serial('a known exempt key refused by the authentication plugins (gone from the validator, no revocation heard): counted', async (t) => {
  const { from, key } = await knownExemptKeyClient(t);
  edge.validator.remove(key.key);
  clock.advance(31_000); // past the key cache's 30 s, within the minute the limiter remembers the key for
  await sixMore(t, 'GET', '/v1/models', { 'x-api-key': key.key, 'x-forwarded-for': from }, 401);
  t.is((await send('GET', '/v1/models', { 'x-forwarded-for': from })).status, 429, 'the same address without the key');
});

test.serial('a known exempt key on a path no route serves (404): counted', async (t) => {
  const { from, key } = await knownExemptKeyClient(t);
  const first404 = await send('GET', '/nope', { 'x-api-key': key.key, 'x-forwarded-for': from });
  t.is(first404.status, 404);
  t.is(first404.headers.get('x-ratelimit-remaining-minute'), '3');
  await sixMore(t, 'GET', '/nope', { 'x-api-key': key.key, 'x-forwarded-for': from }, 404, 3);
});

test.serial('a known exempt key on the guest-login route (its own limiter instance): the global per-address count holds', async (t) => {
  const { from, key } = await knownExemptKeyClient(t);
  await sixMore(t, 'POST', '/llm/auth/guest-login', { 'x-api-key': key.key, 'x-forwarded-for': from }, 200);
  t.is((await send('GET', '/v1/models', { 'x-api-key': key.key, 'x-forwarded-for': from })).status, 200, 'the key itself, on a request it authenticates, is still exempt');
});
