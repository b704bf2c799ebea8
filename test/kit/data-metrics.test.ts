import test from 'ava';
import knexFactory from 'knex';
import { Registry } from 'prom-client';
import { ManualClock, registerDataMetrics, type Bus } from '../../services/kit/index.js';
import { freePort } from '../helpers/process.js';

// The outbox and bus-backlog series are read at scrape time. A read that fails (the database or the
// broker down) leaves its series out of that scrape: the page is still served, and no series claims
// a value it could not read (a label-less gauge's reset would have read 0, "nothing pending").

const valueLines = (page: string, name: string) => page.split('\n').filter((l) => l.startsWith(name) && !l.startsWith('#'));

test('with the database and the broker unreachable the page is served without their series, not with zeros', async (t) => {
  // Nothing listens on this port: every query fails at once with ECONNREFUSED.
  const knex = knexFactory({ client: 'pg', connection: { host: '127.0.0.1', port: await freePort(), user: 'postgres', database: 'test' }, pool: { min: 0, max: 1 }, acquireConnectionTimeout: 5_000 });
  t.teardown(() => knex.destroy());
  let backlogReads = 0;
  const bus = {
    backlog: async () => {
      backlogReads++;
      throw new Error('connection refused');
    },
  } as unknown as Bus;
  const registry = new Registry();
  registerDataMetrics(registry, { knex, bus, clock: new ManualClock() });

  const page = await registry.metrics();
  for (const name of ['outbox_events_pending', 'outbox_oldest_pending_seconds', 'bus_consumer_lag_messages', 'bus_consumer_lag_seconds', 'bus_dead_letters']) {
    t.true(page.includes(`# TYPE ${name} gauge`), `${name} is declared`);
    t.deepEqual(valueLines(page, name), [], `${name} has no value`);
  }
  t.is(backlogReads, 1, 'the bus gauges share one read');
});

test('the bus gauges show each queue of the backlog: its lag and its dead letters', async (t) => {
  const knex = knexFactory({ client: 'pg', connection: { host: '127.0.0.1', port: await freePort(), user: 'postgres', database: 'test' }, pool: { min: 0, max: 1 }, acquireConnectionTimeout: 5_000 });
  t.teardown(() => knex.destroy());
  const bus = { backlog: async () => [{ queue: 'webhooks.deliver', ready: 3, oldestSeconds: 12, dead: 2 }, { queue: 'media.dedup', ready: 0, oldestSeconds: null, dead: 0 }] } as unknown as Bus;
  const registry = new Registry();
  registerDataMetrics(registry, { knex, bus, clock: new ManualClock() });
  const page = await registry.metrics();
  t.deepEqual(valueLines(page, 'bus_dead_letters'), ['bus_dead_letters{queue="webhooks.deliver"} 2', 'bus_dead_letters{queue="media.dedup"} 0']);
  t.deepEqual(valueLines(page, 'bus_consumer_lag_messages'), ['bus_consumer_lag_messages{queue="webhooks.deliver"} 3', 'bus_consumer_lag_messages{queue="media.dedup"} 0']);
  t.deepEqual(valueLines(page, 'bus_consumer_lag_seconds'), ['bus_consumer_lag_seconds{queue="webhooks.deliver"} 12']);
});
