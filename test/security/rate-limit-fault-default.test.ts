import test from 'ava';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { parse } from 'yaml';
import { loadEdgeConfig } from '../../services/gateway/config.js';
import { Schema, parseTieredRateLimitConfig } from '../../plugins/tiered-rate-limit/schema.js';
import { productionWarnings, rateLimitFaultPolicy, startupSummary } from '../../services/platform/production-safety.js';
import { loadBaseConfig } from '../../services/kit/settings/index.js';
import { systemClock } from '../../services/kit/clock.js';
import { TEST_REDIS_URL } from '../helpers/env.js';
import { startFaultProxy } from '../helpers/fault-proxy.js';
import { deleteRedisKeys } from '../helpers/redis.js';
import { REPOSITORY_ROOT } from '../helpers/repository.js';
import { deckVars, loadTestDeck } from '../gateway/deck-fixture.js';
import { startEdgeWithFakes } from '../gateway/edge-harness.js';

// Secure by default: while the rate limiter cannot reach its counters (Redis down or slow), the
// edge refuses (503) unless an operator chose to serve without limits (`allow`), and a production
// start says so when they did. The default is `deny` wherever one is set: the embedded edge's
// setting, the DECK_* variable it fills, the Kong plugin's schema, the compose deployment.

const PREFIX = `fault_default_${process.pid}_${randomBytes(3).toString('hex')}`;
test.after.always(() => deleteRedisKeys(PREFIX));

test('deny is the default of the setting, of the DECK_* variable, of every deck instance and of the plugin schema; allow stays an explicit choice', (t) => {
  t.is(loadEdgeConfig({}).EDGE_RATE_LIMIT_FAULT_POLICY, 'deny');
  t.is(loadEdgeConfig({ EDGE_RATE_LIMIT_FAULT_POLICY: 'allow' }).EDGE_RATE_LIMIT_FAULT_POLICY, 'allow');
  t.throws(() => loadEdgeConfig({ EDGE_RATE_LIMIT_FAULT_POLICY: 'open' }), { message: /EDGE_RATE_LIMIT_FAULT_POLICY/ });
  t.is(deckVars().DECK_RATE_LIMIT_FAULT_POLICY, 'deny');
  const instances = (vars: Record<string, string>) => {
    const deck = loadTestDeck(vars);
    const all = [...(deck.plugins ?? []), ...(deck.services ?? []).flatMap((s) => (s.routes ?? []).flatMap((r) => r.plugins ?? []))];
    return all.filter((p) => p.name === 'tiered-rate-limit').map((p) => parseTieredRateLimitConfig(p.config).fault_policy);
  };
  t.deepEqual(instances({}), ['deny', 'deny'], 'the global instance and the guest-login route’s');
  t.deepEqual(instances({ DECK_RATE_LIMIT_FAULT_POLICY: 'allow' }), ['allow', 'allow']);
  t.is(parseTieredRateLimitConfig({}).fault_policy, 'deny', 'Kong applies the schema default when the field is left out');
  const field = Schema.find((entry) => 'fault_policy' in entry) as unknown as { fault_policy: { default: string; one_of: string[] } };
  t.is(field.fault_policy.default, 'deny');
  t.deepEqual(field.fault_policy.one_of, ['allow', 'deny']);
});

test('the compose deployment defaults to deny too', (t) => {
  const compose = parse(readFileSync(join(REPOSITORY_ROOT, 'deploy/compose.yaml'), 'utf8'), { merge: true }) as { services: Record<string, { environment?: Record<string, unknown> }> };
  const settings = Object.values(compose.services).flatMap((s) => Object.entries(s.environment ?? {})).filter(([name]) => name === 'DECK_RATE_LIMIT_FAULT_POLICY' || name === 'EDGE_RATE_LIMIT_FAULT_POLICY');
  t.true(settings.length > 0);
  for (const [name, value] of settings) t.regex(String(value), /^\$\{RATE_LIMIT_FAULT_POLICY:-deny\}$|^deny$/, name);
  t.regex(readFileSync(join(REPOSITORY_ROOT, 'deploy/example.env'), 'utf8'), /^RATE_LIMIT_FAULT_POLICY=deny$/m);
});

test('a production start warns when allow is chosen (by EDGE_ or by the DECK_ variable that wins over it), and only then', (t) => {
  const production = (env: Record<string, string>) => loadBaseConfig({ NODE_ENV: 'production', EDGE_CORS_ORIGINS: 'https://app.example.com', ...env });
  t.deepEqual(productionWarnings(production({})), []);
  t.deepEqual(productionWarnings(production({ EDGE_RATE_LIMIT_FAULT_POLICY: 'deny' })), []);
  const warned = productionWarnings(production({ EDGE_RATE_LIMIT_FAULT_POLICY: 'allow' }));
  t.is(warned.length, 1);
  t.regex(warned[0]!, /^warning: EDGE_RATE_LIMIT_FAULT_POLICY=allow: .*no rate limit/);
  t.is(productionWarnings(production({ DECK_RATE_LIMIT_FAULT_POLICY: 'allow', EDGE_RATE_LIMIT_FAULT_POLICY: 'deny' })).length, 1);
  t.deepEqual(productionWarnings(production({ DECK_RATE_LIMIT_FAULT_POLICY: 'deny', EDGE_RATE_LIMIT_FAULT_POLICY: 'allow' })), []);
  t.deepEqual(productionWarnings(loadBaseConfig({ NODE_ENV: 'development', EDGE_RATE_LIMIT_FAULT_POLICY: 'allow' })), []);
  t.is(rateLimitFaultPolicy({}), 'deny');
  const config = production({ EDGE_RATE_LIMIT_FAULT_POLICY: 'allow' });
  const summary = startupSummary(config, 'http://127.0.0.1:8000', { pglite: false, 'local-rate-limits': false, 'generated-gateway-secret': false, 'generated-master-key': false });
  t.true(summary.includes(warned[0]!), 'printed with the start summary');
});

test('with Redis cut and no policy set, the edge refuses instead of serving without limits, guest creation included', async (t) => {
  const proxy = await startFaultProxy({ host: '127.0.0.1', port: Number(new URL(TEST_REDIS_URL).port || 6379) });
  t.teardown(() => proxy.close());
  const edge = await startEdgeWithFakes({
    clock: systemClock,
    vars: { DECK_RATE_LIMIT_POLICY: 'redis', DECK_REDIS_URL: proxy.url('redis'), DECK_REDIS_PREFIX: PREFIX, DECK_RATE_LIMIT_IP_PER_MINUTE: '100000' },
  });
  t.teardown(() => edge.close());
  t.is(edge.deck.plugins!.find((p) => p.name === 'tiered-rate-limit')!.config!.fault_policy, 'deny');
  t.is((await fetch(`${edge.url}/openapi.json`)).status, 200, 'counted while Redis answers');
  proxy.cut();
  const refused = await fetch(`${edge.url}/openapi.json`);
  t.is(refused.status, 503);
  t.like(((await refused.json()) as { error: object }).error, { type: 'internal_error', message: 'Rate limiting is temporarily unavailable' });
  t.is((await fetch(`${edge.url}/llm/auth/guest-login`, { method: 'POST' })).status, 503, 'no guest is minted while the hourly limit cannot be counted');
  proxy.resume();
});
