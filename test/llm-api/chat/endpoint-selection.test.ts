import test from 'ava';
import { ManualClock } from '../../../services/kit/index.js';
import { EndpointHealth } from '../../../services/llm-api/routing/health.js';
import { orderEndpoints, seededRandom } from '../../../services/llm-api/routing/select.js';

const ep = (url: string, priority: number, weight: number, healthy = true) => ({ url, priority, weight, healthy });

test('passive health: threshold consecutive failures → out for the cool-down, then half-open; success resets', (t) => {
  const clock = new ManualClock(1_000_000);
  const health = new EndpointHealth({ threshold: 3, cooldownMs: 30_000, clock });
  health.failure('a');
  health.failure('a');
  t.true(health.isHealthy('a'));
  health.success('a');
  health.failure('a');
  health.failure('a');
  t.true(health.isHealthy('a'));
  health.failure('a');
  t.false(health.isHealthy('a'));
  t.deepEqual(health.unhealthy(), ['a']);
  clock.advance(29_999);
  t.false(health.isHealthy('a'));
  clock.advance(1);
  t.true(health.isHealthy('a'));
  // Half-open: one more failure takes it out again at once.
  health.failure('a');
  t.false(health.isHealthy('a'));
  health.success('a');
  t.true(health.isHealthy('a'));
});

test('order: priority first, weighted among equals (seeded, reproducible), switched-off left out, unhealthy apart', (t) => {
  const clock = new ManualClock();
  const health = new EndpointHealth({ threshold: 1, cooldownMs: 1000, clock });
  const endpoints = [ep('p1', 1, 1), ep('a', 0, 3), ep('b', 0, 1), ep('off', 0, 100, false), ep('sick', 0, 1)];
  health.failure('sick');
  const random = seededRandom(7);
  const firsts: Record<string, number> = {};
  for (let i = 0; i < 4000; i++) {
    const order = orderEndpoints(endpoints, health, random);
    t.is(order.healthy.at(-1)!.url, 'p1');
    t.deepEqual(order.unhealthy.map((e) => e.url), ['sick']);
    t.false(order.healthy.some((e) => e.url === 'off'));
    const first = order.healthy[0]!.url;
    firsts[first] = (firsts[first] ?? 0) + 1;
  }
  t.deepEqual(Object.keys(firsts).sort(), ['a', 'b']);
  t.true(Math.abs(firsts.a! / 4000 - 0.75) < 0.03, JSON.stringify(firsts));
  // Same seed, same sequence.
  const r1 = seededRandom(99);
  const r2 = seededRandom(99);
  t.deepEqual(Array.from({ length: 5 }, () => r1()), Array.from({ length: 5 }, () => r2()));
});

test('one endpoint: tried when healthy, kept apart while unhealthy, left out when switched off; the random source is not drawn', (t) => {
  const clock = new ManualClock();
  const health = new EndpointHealth({ threshold: 1, cooldownMs: 1000, clock });
  let draws = 0;
  const random = () => {
    draws++;
    return 0.5;
  };
  t.deepEqual(orderEndpoints([ep('only', 0, 1)], health, random), { healthy: [ep('only', 0, 1)], unhealthy: [] });
  health.failure('only');
  t.deepEqual(orderEndpoints([ep('only', 0, 1)], health, random), { healthy: [], unhealthy: [ep('only', 0, 1)] });
  t.deepEqual(orderEndpoints([ep('only', 0, 1, false)], health, random), { healthy: [], unhealthy: [] });
  clock.advance(1000);
  t.deepEqual(orderEndpoints([ep('only', 0, 1)], health, random).healthy.map((e) => e.url), ['only']);
  t.is(draws, 0);
});
