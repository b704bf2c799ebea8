import test from 'ava';
import { systemClock } from '../../services/kit/clock.js';
import { startEdgeWithFakes } from './edge-harness.js';

// The embedded edge's /readyz follows the process's readiness checks (the drain adds `shutdown`;
// under `npm start` the database and the bus are checked too); the answer stays the deck's while
// every check passes. The SIGTERM path through a real edge process: test/reliability/edge-sigterm.test.ts.

test('/readyz: the deck answer while every check passes, 503 naming the failing check otherwise; liveness and proxied routes unaffected', async (t) => {
  let databaseUp = true;
  const readiness: Record<string, () => Promise<void>> = {
    database: () => (databaseUp ? Promise.resolve() : Promise.reject(new Error('connection refused'))),
  };
  const edge = await startEdgeWithFakes({ clock: systemClock, readiness, vars: { DECK_RATE_LIMIT_IP_PER_MINUTE: '100000' } });
  t.teardown(() => edge.close());

  const ready = await fetch(`${edge.url}/readyz`);
  t.is(ready.status, 200);
  t.deepEqual(await ready.json(), { status: 'ready', service: 'gateway' });

  databaseUp = false;
  const down = await fetch(`${edge.url}/readyz`, { headers: { 'x-request-id': 'probe-1' } });
  t.is(down.status, 503);
  t.is(down.headers.get('x-request-id'), 'probe-1');
  t.deepEqual(await down.json(), { status: 'not_ready', service: 'gateway', checks: { database: 'unavailable' } });
  // Every spelling the router sends to the readiness route gets the same answer.
  t.is((await fetch(`${edge.url}//readyz`)).status, 503);
  t.is((await fetch(`${edge.url}/readyz`, { method: 'HEAD' })).status, 503);
  t.is((await fetch(`${edge.url}/healthz`)).status, 200, 'liveness is not readiness');
  t.is((await fetch(`${edge.url}/openapi.json`)).status, 200, 'proxied routes are still served');

  // What the kit's drain does (markDraining): a check added to the same object, read per probe.
  databaseUp = true;
  readiness.shutdown = () => Promise.reject(new Error('the process is shutting down'));
  const draining = await fetch(`${edge.url}/readyz`);
  t.is(draining.status, 503);
  t.deepEqual(((await draining.json()) as { checks: unknown }).checks, { database: 'ok', shutdown: 'unavailable' });
});
