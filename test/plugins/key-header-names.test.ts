import test from 'ava';
import { createApiKeyAuth } from '../../plugins/api-key-auth/core.js';
import { parseApiKeyAuthConfig } from '../../plugins/api-key-auth/schema.js';
import type { Decision, EdgeRequest } from '../../plugins/core/types.js';
import { createTieredRateLimit } from '../../plugins/tiered-rate-limit/core.js';
import { createLocalStore } from '../../plugins/tiered-rate-limit/policies/index.js';
import { parseTieredRateLimitConfig } from '../../plugins/tiered-rate-limit/schema.js';
import { ManualClock } from '../../services/kit/clock.js';
import { startFakeValidator } from './fakes.js';

// api-key-auth's `header_name` changed: the rate limiter must know the key arrives in it, since its
// rewrite phase (before authentication) decides by the presented key whether the per-address limit
// may wait for the key's check (keys of ip_exempt_tiers are never held to it).
const TOKEN = 'h'.repeat(40);
const T0 = Date.UTC(2026, 10, 22, 10, 0, 10);
let validator: Awaited<ReturnType<typeof startFakeValidator>>;
test.before(async () => {
  validator = await startFakeValidator(TOKEN);
});
test.after.always(() => validator?.close());

let ipCounter = 0;
const freshIp = () => `10.77.${Math.floor(++ipCounter / 250)}.${ipCounter % 250}`;

function setup(limiterOverrides: Record<string, unknown>) {
  const clock = new ManualClock(T0);
  const auth = createApiKeyAuth(parseApiKeyAuthConfig({ validate_url: validator.url, gateway_token: TOKEN, header_name: 'X-Client-Key' }), { clock });
  const limiter = createTieredRateLimit(parseTieredRateLimitConfig({ ip_per_minute: 1, ...limiterOverrides }), { store: createLocalStore(), clock });
  /** One request as a host runs the plugins: the limiter's rewrite, api-key-auth, the limiter's access. */
  async function send(ip: string, headers: Record<string, string>): Promise<{ phase: 'rewrite' | 'auth' | 'access'; decision: Decision; request: EdgeRequest }> {
    const request: EdgeRequest = { method: 'GET', path: '/v1/models', headers, clientIp: ip, shared: {} };
    const rewrite = await limiter.rewrite!(request);
    if (rewrite.kind === 'respond') return { phase: 'rewrite', decision: rewrite, request };
    Object.assign(request.shared, rewrite.share);
    if (Object.keys(headers).length === 0) return { phase: 'rewrite', decision: rewrite, request };
    const auth_ = await auth.access(request);
    if (auth_.kind === 'respond') return { phase: 'auth', decision: auth_, request };
    if (auth_.identity) request.shared.apikey = auth_.identity;
    return { phase: 'access', decision: await limiter.access(request), request };
  }
  return { send, close: async () => (await limiter.close!(), await auth.close()) };
}

const statusOf = (d: Decision) => (d.kind === 'respond' ? d.status : null);

test('a key in the configured header_name, listed in key_header_names: an exempt key from an address over its limit is served, a non-exempt one refused after its check', async (t) => {
  const { send, close } = setup({ key_header_names: ['X-Client-Key'] });
  const enterprise = validator.add('user_hdr_ent', 'enterprise');
  const pro = validator.add('user_hdr_pro', 'pro');
  const ip = freshIp();
  t.is(statusOf((await send(ip, {})).decision), null, 'an anonymous request spends the address limit (1/minute)');

  const exempt = await send(ip, { 'x-client-key': enterprise.key });
  t.is(exempt.phase, 'access', 'the rewrite put the refusal off until the key was checked');
  t.is(statusOf(exempt.decision), null, 'an exempt key is never held to the per-address limit');
  t.truthy(exempt.request.shared.deferredIpRefusal);
  const again = await send(ip, { 'x-client-key': enterprise.key });
  t.is(statusOf(again.decision), null, 'a key seen exempt skips the per-address count');
  t.is(again.request.shared.deferredIpRefusal, undefined);

  const other = freshIp(); // deferrals are capped per address and window at the limit itself (1 here)
  await send(other, {});
  const held = await send(other, { 'x-client-key': pro.key });
  t.is(held.phase, 'access');
  t.is(statusOf(held.decision), 429, 'a non-exempt key is refused once its tier is known');
  t.regex((held.decision as { body: { error: { message: string } } }).body.error.message, /1 requests per minute from this address/);
  await close();
});

test('the same key header left out of key_header_names (the default names x-api-key only) reads as no key: refused before its check', async (t) => {
  t.deepEqual(parseTieredRateLimitConfig({}).key_header_names, ['x-api-key']);
  const { send, close } = setup({});
  const enterprise = validator.add('user_hdr_default', 'enterprise');
  const ip = freshIp();
  await send(ip, {});
  const refused = await send(ip, { 'x-client-key': enterprise.key });
  t.is(refused.phase, 'rewrite');
  t.is(statusOf(refused.decision), 429);
  await close();
});
