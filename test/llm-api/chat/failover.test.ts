import test from 'ava';
import { ApiError, ManualClock } from '../../../services/kit/index.js';
import type { Candidate } from '../../../services/llm-api/models/registry.js';
import { ClientClosed, failover, planAttempts, type Attempt, type AttemptFailure, type SendResult } from '../../../services/llm-api/routing/failover.js';
import { EndpointHealth } from '../../../services/llm-api/routing/health.js';
import { seededRandom } from '../../../services/llm-api/routing/select.js';

// Failover over a fake `send`: no HTTP, milliseconds.

const candidate = (provider: string, endpoints: Array<[string, number, number]>): Candidate =>
  ({
    pm: { id: `pm-${provider}`, provider_id: provider, provider_original_model_id: 'm', model_public_id: 'm', pricing: { lines: [] } },
    provider: { row: { id: provider, name: provider }, apiKey: null, endpoints: endpoints.map(([url, priority, weight]) => ({ url, priority, weight, healthy: true })) },
  }) as unknown as Candidate;

const health = (threshold = 1) => new EndpointHealth({ threshold, cooldownMs: 60_000, clock: new ManualClock(1_000) });
const signal = () => new AbortController().signal;
const ok = <T>(value: T): SendResult<T> => ({ ok: true, value });
const failure = (status: number, flags: Partial<AttemptFailure> = {}): SendResult<never> => ({
  ok: false,
  failure: { error: new ApiError(status, `failure ${status}`), retry: true, unhealthy: status >= 500, ...flags },
});
const urls = (attempts: Attempt[]) => attempts.map((a) => a.endpoint.url);

test('plan: candidates in order; per provider priority first, weighted among equals with a seed; unhealthy endpoints last', (t) => {
  const h = health();
  const candidates = [candidate('p1', [['a', 0, 3], ['b', 0, 1], ['c', 1, 100]]), candidate('p2', [['d', 0, 1]])];
  h.failure('b');
  const random = seededRandom(42);
  const counts: Record<string, number> = {};
  for (let i = 0; i < 2000; i++) {
    const plan = urls(planAttempts(candidates, h, random));
    t.deepEqual(plan.slice(1), ['c', 'd', 'b']);
    counts[plan[0]!] = (counts[plan[0]!] ?? 0) + 1;
  }
  t.deepEqual(counts, { a: 2000 });
  h.success('b');
  const firsts: Record<string, number> = {};
  const seeded = seededRandom(7);
  for (let i = 0; i < 4000; i++) {
    const plan = urls(planAttempts(candidates, h, seeded));
    t.deepEqual(plan.slice(2), ['c', 'd']);
    firsts[plan[0]!] = (firsts[plan[0]!] ?? 0) + 1;
  }
  t.true(Math.abs(firsts.a! / 4000 - 0.75) < 0.03, JSON.stringify(firsts));
  // The same seed gives the same plans.
  const one = seededRandom(99);
  const two = seededRandom(99);
  t.deepEqual(
    Array.from({ length: 20 }, () => urls(planAttempts(candidates, h, one))),
    Array.from({ length: 20 }, () => urls(planAttempts(candidates, h, two))),
  );
});

test('failover: tries in plan order until one answers; 5xx and connect failures mark health, 429 and 401 do not', async (t) => {
  const h = health(1);
  const attempts = planAttempts([candidate('p1', [['a', 0, 1], ['b', 1, 1], ['c', 2, 1]]), candidate('p2', [['d', 0, 1]])], h, seededRandom(1));
  const tried: string[] = [];
  const outcomes: Record<string, SendResult<string>> = {
    a: failure(503),
    b: failure(429, { retryAfterSeconds: 5 }),
    c: failure(502, { unhealthy: false }), // e.g. the provider's own 401: next, health untouched
    d: ok('answer from d'),
  };
  const logged: string[] = [];
  const result = await failover(attempts, async (a) => (tried.push(a.endpoint.url), outcomes[a.endpoint.url]!), {
    health: h,
    signal: signal(),
    onFailure: (a, f) => logged.push(`${a.candidate.provider.row.id} ${a.endpoint.url} ${f.error.status}`),
  });
  t.is(result.value, 'answer from d');
  t.is(result.tries, 4);
  t.is(result.attempt.endpoint.url, 'd');
  t.deepEqual(tried, ['a', 'b', 'c', 'd']);
  t.deepEqual(logged, ['p1 a 503', 'p1 b 429', 'p1 c 502']);
  t.false(h.isHealthy('a'));
  t.true(h.isHealthy('b'));
  t.true(h.isHealthy('c'));
  t.true(h.isHealthy('d'));
  // The next plan puts the unhealthy endpoint last.
  t.is(urls(planAttempts([candidate('p1', [['a', 0, 1], ['b', 1, 1]])], h, seededRandom(1))).at(-1), 'a');
});

test('failover: a success restores an endpoint; a threshold of failures takes it out', async (t) => {
  const h = health(2);
  const attempts = planAttempts([candidate('p', [['x', 0, 1], ['y', 1, 1]])], h, seededRandom(3));
  const flaky = async (a: Attempt) => (a.endpoint.url === 'x' ? failure(500) : ok(a.endpoint.url));
  await failover(attempts, flaky, { health: h, signal: signal() });
  t.true(h.isHealthy('x'));
  await failover(attempts, flaky, { health: h, signal: signal() });
  t.false(h.isHealthy('x'));
  await failover(attempts, async (a) => ok(a.endpoint.url), { health: h, signal: signal() });
  t.true(h.isHealthy('x'));
});

test('failover: a request at fault (retry: false) stops at once, health untouched', async (t) => {
  const h = health(1);
  const attempts = planAttempts([candidate('p', [['x', 0, 1], ['y', 1, 1]])], h, seededRandom(3));
  let calls = 0;
  const error = await t.throwsAsync(
    failover(attempts, async () => (calls++, failure(400, { retry: false, unhealthy: false })), { health: h, signal: signal() }),
    { instanceOf: ApiError },
  );
  t.is(error!.status, 400);
  t.is(calls, 1);
  t.true(h.isHealthy('x'));
});

test('failover: everything failed → the last error; any rate limited → 429 with a bounded Retry-After; nothing to try → 503', async (t) => {
  const h = health(5);
  const attempts = planAttempts([candidate('p', [['x', 0, 1], ['y', 1, 1]])], h, seededRandom(3));
  const last = await t.throwsAsync(failover(attempts, async (a) => failure(a.endpoint.url === 'x' ? 503 : 504), { health: h, signal: signal() }), { instanceOf: ApiError });
  t.is(last!.status, 504);
  const limitedFirst = await t.throwsAsync(failover(attempts, async (a) => (a.endpoint.url === 'x' ? failure(429, { retryAfterSeconds: 4 }) : failure(504)), { health: h, signal: signal() }), { instanceOf: ApiError });
  t.is(limitedFirst!.status, 429);
  t.is(limitedFirst!.headers['retry-after'], '4');
  const limited = await t.throwsAsync(failover(attempts, async () => failure(429, { retryAfterSeconds: 600 }), { health: h, signal: signal() }), { instanceOf: ApiError });
  t.is(limited!.status, 429);
  t.is(limited!.headers['retry-after'], '60');
  const none = await t.throwsAsync(failover([], async () => ok(1), { health: h, signal: signal() }), { instanceOf: ApiError });
  t.is(none!.status, 503);
});

test('failover: no retry after the first byte — an answer ends failover even if it breaks later', async (t) => {
  const h = health(1);
  const attempts = planAttempts([candidate('p', [['x', 0, 1], ['y', 1, 1]])], h, seededRandom(3));
  let sends = 0;
  // `send` returns once the first chunk arrived; the stream dies afterwards.
  async function* brokenAfterFirst() {
    yield 'first chunk';
    throw new Error('socket reset');
  }
  const dispatched = await failover(attempts, async () => (sends++, ok(brokenAfterFirst())), { health: h, signal: signal() });
  const seen: string[] = [];
  await t.throwsAsync(async () => {
    for await (const chunk of dispatched.value) seen.push(chunk);
  });
  t.deepEqual(seen, ['first chunk']);
  t.is(sends, 1);
  t.true(h.isHealthy('x'));
});

test('failover: a request whose client left stops before the next attempt, with the signal reason', async (t) => {
  const h = health(1);
  const attempts = planAttempts([candidate('p', [['x', 0, 1], ['y', 1, 1]])], h, seededRandom(3));
  const controller = new AbortController();
  let sends = 0;
  await t.throwsAsync(
    failover(attempts, async () => (sends++, controller.abort(new ClientClosed()), failure(500)), { health: h, signal: controller.signal }),
    { instanceOf: ClientClosed },
  );
  t.is(sends, 1);
});
