import test from 'ava';
import { ApiError, ManualClock } from '../../../services/kit/index.js';
import type { Candidate } from '../../../services/llm-api/models/registry.js';
import { MIXED_FAILURE_RETRY_AFTER_SECONDS, failover, planAttempts, type AttemptFailure, type SendResult } from '../../../services/llm-api/routing/failover.js';
import { EndpointHealth } from '../../../services/llm-api/routing/health.js';
import { seededRandom } from '../../../services/llm-api/routing/select.js';

// The error a client gets when every provider of a model failed and one of them was rate limited
// (a 429, with the soonest Retry-After), over a fake `send`.

const candidate = (provider: string, urls: string[]): Candidate =>
  ({
    pm: { id: `pm-${provider}`, provider_id: provider, provider_original_model_id: 'm', model_public_id: 'm', pricing: { lines: [] } },
    provider: { row: { id: provider, name: provider }, apiKey: null, endpoints: urls.map((url, i) => ({ url, priority: i, weight: 1, healthy: true })) },
  }) as unknown as Candidate;

const health = () => new EndpointHealth({ threshold: 1, cooldownMs: 60_000, clock: new ManualClock(1_000) });
const limited = (retryAfterSeconds: number): SendResult<never> => ({
  ok: false,
  failure: { error: new ApiError(429, 'The model provider is rate limited'), retry: true, unhealthy: false, retryAfterSeconds } satisfies AttemptFailure,
});

async function rateLimitedAnswer(retryAfters: Record<string, number>) {
  const h = health();
  const attempts = planAttempts([candidate('p1', ['a', 'b']), candidate('p2', ['c'])].filter((c) => c.provider.endpoints.some((e) => e.url in retryAfters)), h, seededRandom(1));
  const relevant = attempts.filter((a) => a.endpoint.url in retryAfters);
  const error = await failover(relevant, async (a) => limited(retryAfters[a.endpoint.url]!), { health: h, signal: new AbortController().signal }).then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!(error instanceof ApiError)) throw new Error(`expected an ApiError, got ${String(error)}`);
  return { error, health: h };
}

test('all rate limited: Retry-After is the soonest any provider asked for, not the last one tried', async (t) => {
  const { error, health: h } = await rateLimitedAnswer({ a: 30, b: 45, c: 2 });
  t.is(error.status, 429);
  t.is(error.headers['retry-after'], '2');
  const other = await rateLimitedAnswer({ a: 3, b: 45, c: 50 });
  t.is(other.error.headers['retry-after'], '3');
  // Rate limits never count against health.
  t.true(h.isHealthy('a') && h.isHealthy('b') && h.isHealthy('c'));
});

test('a Retry-After of zero or below becomes 1 s (never 0: an instant retry storm); above 60 s is capped', async (t) => {
  for (const [given, expected] of [
    [-5, '1'],
    [0, '1'],
    [0.2, '1'],
    [-0.6, '1'],
    [7.4, '7'],
    [600, '60'],
    [Infinity, '60'],
    [NaN, '1'],
  ] as const) {
    const { error } = await rateLimitedAnswer({ a: given });
    t.is(error.status, 429);
    t.is(error.headers['retry-after'], expected, String(given));
  }
});

test('a 429 that is not the last failure still makes the answer a 429: a rate limit wins over a later 5xx', async (t) => {
  const h = health();
  const attempts = planAttempts([candidate('p1', ['a', 'b'])], h, seededRandom(1));
  const error = await t.throwsAsync(
    failover(
      attempts,
    async (a): Promise<SendResult<never>> =>
      a.endpoint.url === 'a' ? limited(5) : { ok: false, failure: { error: new ApiError(502, 'The model provider could not be reached'), retry: true, unhealthy: true } },
      { health: h, signal: new AbortController().signal },
    ),
    { instanceOf: ApiError },
  );
  t.is(error!.status, 429);
  t.is(error!.headers['retry-after'], '5');
  t.is(error!.message, 'The providers for this model are rate limited or unavailable');
  t.false(h.isHealthy('b'));
  t.true(h.isHealthy('a'));
});

const failed = (status: number, code?: string, flags: Partial<AttemptFailure> = {}): SendResult<never> => ({
  ok: false,
  failure: { error: new ApiError(status, `failure ${status}`, code ? { code } : {}), retry: true, unhealthy: status >= 500, ...flags },
});

test('every provider failed: a 429 anywhere wins over timeouts, 5xx and providers we cannot call, with the soonest Retry-After of the 429s, capped as not all were 429s', async (t) => {
  const h = health();
  const attempts = planAttempts([candidate('p1', ['a', 'b']), candidate('p2', ['c']), candidate('p3', ['d'])], h, seededRandom(1));
  const outcomes: Record<string, SendResult<never>> = {
    a: limited(20),
    b: failed(504),
    c: limited(9),
    d: failed(502, 'provider_key_unavailable', { unhealthy: false }),
  };
  const error = await t.throwsAsync(failover(attempts, async (a) => outcomes[a.endpoint.url]!, { health: h, signal: new AbortController().signal }), { instanceOf: ApiError });
  t.is(error!.status, 429);
  // The soonest of the 429s is 9 s, but not every failure was a 429: capped (below).
  t.is(error!.headers['retry-after'], String(MIXED_FAILURE_RETRY_AFTER_SECONDS));
  t.not(error!.code, 'provider_key_unavailable');
});

test('not every failure a 429 (a timeout, a 5xx, a provider we cannot call): the Retry-After is at most 5 s; every failure a 429: the soonest, uncapped', async (t) => {
  t.is(MIXED_FAILURE_RETRY_AFTER_SECONDS, 5);
  const h = health();
  const attempts = planAttempts([candidate('p1', ['a', 'b']), candidate('p2', ['c'])], h, seededRandom(1));
  const answer = async (outcomes: Record<string, SendResult<never>>) => {
    const error = await t.throwsAsync(failover(attempts, async (a) => outcomes[a.endpoint.url]!, { health: h, signal: new AbortController().signal }), { instanceOf: ApiError });
    return { status: error!.status, retryAfter: error!.headers['retry-after'], message: error!.message };
  };
  const mixed = 'The providers for this model are rate limited or unavailable';
  // openai-node would sleep 30 s although the provider that timed out may answer at once.
  t.deepEqual(await answer({ a: limited(30), b: failed(504), c: limited(45) }), { status: 429, retryAfter: '5', message: mixed });
  t.deepEqual(await answer({ a: failed(503), b: limited(60), c: failed(502, 'provider_key_unavailable', { unhealthy: false }) }), { status: 429, retryAfter: '5', message: mixed });
  t.deepEqual(await answer({ a: failed(502, 'upstream_error', { unhealthy: false }), b: limited(30), c: limited(40) }), { status: 429, retryAfter: '5', message: mixed });
  // A sooner one than the cap stays as it is.
  t.deepEqual(await answer({ a: limited(3), b: failed(504), c: limited(30) }), { status: 429, retryAfter: '3', message: mixed });
  // Every failure a 429: nothing else could answer sooner, so the soonest, as the providers said.
  t.deepEqual(await answer({ a: limited(30), b: limited(45), c: limited(20) }), { status: 429, retryAfter: '20', message: 'All providers for this model are rate limited' });
});

test('without any 429 the last failure decides, as before; a request at fault after a 429 is still its own error', async (t) => {
  const h = health();
  const attempts = planAttempts([candidate('p1', ['a', 'b']), candidate('p2', ['c'])], h, seededRandom(1));
  const signal = new AbortController().signal;
  const noLimit: Record<string, SendResult<never>> = { a: failed(504), b: failed(502), c: failed(502, 'provider_key_unavailable', { unhealthy: false }) };
  const last = await t.throwsAsync(failover(attempts, async (a) => noLimit[a.endpoint.url]!, { health: h, signal }), { instanceOf: ApiError });
  t.is(last!.status, 502);
  t.is(last!.code, 'provider_key_unavailable');
  const refused: Record<string, SendResult<never>> = { a: limited(3), b: failed(400, 'context_length_exceeded', { retry: false, unhealthy: false }), c: limited(1) };
  const atFault = await t.throwsAsync(failover(attempts, async (a) => refused[a.endpoint.url]!, { health: h, signal }), { instanceOf: ApiError });
  t.is(atFault!.status, 400);
  t.is(atFault!.code, 'context_length_exceeded');
});
