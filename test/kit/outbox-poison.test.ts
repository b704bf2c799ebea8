import test, { type ExecutionContext } from 'ava';
import type { Knex } from 'knex';
import { Registry } from 'prom-client';
import {
  createDatabase,
  createOutboxRelay,
  kitMigrations,
  ManualClock,
  migrateAll,
  OUTBOX_PUBLISH_ATTEMPTS,
  outboxRetryDelayMs,
  recordEvent,
  registerDataMetrics,
  type Bus,
  type Database,
  type Logger,
} from '../../services/kit/index.js';
import { openTestRuntime } from '../helpers/env.js';

// An outbox row the bus refuses for good (not because the broker is away) must not block every row
// recorded after it: it is retried with a growing delay while the later rows are published, then,
// after OUTBOX_PUBLISH_ATTEMPTS refusals, parked (kept, marked dead, logged once, counted by
// `outbox_events_dead`). A broker that is away refuses nothing for good: no row is charged for it.
// Run on both drivers; time is the relay's clock (a manual one), the bus a fake the test steers.

/** A bus that refuses one message for good, and, while `away`, everything as unavailable. */
function steeredBus(poisonType: string) {
  const published: string[] = [];
  const state = { away: false, poisonOffers: 0 };
  const bus = {
    driver: 'pg',
    async publish(routingKey: string, body: { id: string }) {
      if (state.away) throw Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5672'), { code: 'ECONNREFUSED' });
      if (routingKey === poisonType) {
        state.poisonOffers++;
        throw new Error('PRECONDITION_FAILED - message size exceeds the maximum allowed');
      }
      published.push(body.id);
    },
    backlog: async () => [],
  } as unknown as Bus;
  return { bus, published, state };
}

/** A logger recording its warn and error lines. */
function recordingLogger() {
  const lines: Array<{ level: string; fields: Record<string, unknown>; message: string }> = [];
  const at = (level: string) => (fields: Record<string, unknown>, message: string) => void lines.push({ level, fields, message });
  const logger = { debug: () => {}, info: () => {}, warn: at('warn'), error: at('error'), child: () => logger } as unknown as Logger;
  return { logger, lines };
}

const metricValue = async (registry: Registry, name: string) => {
  const line = (await registry.metrics()).split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.split(' ')[1]);
};

async function poisonDoesNotStall(t: ExecutionContext, knex: Knex, prefix: string) {
  const clock = new ManualClock(Date.UTC(2026, 11, 7));
  const poisonType = `${prefix}.poison`;
  const { bus, published, state } = steeredBus(poisonType);
  const { logger, lines } = recordingLogger();
  const relay = createOutboxRelay({ knex, bus, clock, logger, pollMs: 60_000 });
  const registry = new Registry();
  registerDataMetrics(registry, { knex, bus, clock });

  const before = await recordEvent(knex, `${prefix}.ok`, { n: 1 });
  const poison = await recordEvent(knex, poisonType, { n: 2 });
  const after = await recordEvent(knex, `${prefix}.ok`, { n: 3 });

  // The refused row does not hold back the one recorded after it.
  t.is(await relay.drain(), 2);
  t.deepEqual(published, [before, after]);
  t.is(state.poisonOffers, 1);

  // It waits out its delay before it is offered again; rows recorded meanwhile go at once.
  const later = await recordEvent(knex, `${prefix}.ok`, { n: 4 });
  t.is(await relay.drain(), 1);
  t.deepEqual(published, [before, after, later]);
  t.is(state.poisonOffers, 1, 'not offered again before its delay');

  // A broker away is not the row's fault: nothing is charged, the pass fails as before.
  state.away = true;
  clock.advance(outboxRetryDelayMs(1) + 1);
  await t.throwsAsync(relay.drain(), { message: /ECONNREFUSED/ });
  t.is((await knex('outbox_events').where({ id: poison }).first()).publish_failures, 1);
  state.away = false;

  // Refused again and again, with growing delays, then parked.
  for (let refusals = 1; refusals < OUTBOX_PUBLISH_ATTEMPTS; refusals++) {
    clock.advance(outboxRetryDelayMs(refusals) + 1);
    t.is(await relay.drain(), 0);
    t.is(state.poisonOffers, refusals + 1);
  }
  const parked = await knex('outbox_events').where({ id: poison }).first();
  t.is(parked.publish_failures, OUTBOX_PUBLISH_ATTEMPTS);
  t.not(parked.dead_at, null, 'parked');
  t.is(parked.published_at, null, 'kept, not published');

  // Never offered again, however long the relay runs; the rest flows.
  clock.advance(24 * 3_600_000);
  const last = await recordEvent(knex, `${prefix}.ok`, { n: 5 });
  t.is(await relay.drain(), 1);
  t.is(state.poisonOffers, OUTBOX_PUBLISH_ATTEMPTS);
  t.deepEqual(published, [before, after, later, last]);

  // Logged once as parked, naming the row; warned once when it was first refused.
  const parkedLines = lines.filter((l) => l.level === 'error');
  t.is(parkedLines.length, 1);
  t.like(parkedLines[0]!.fields, { event_id: poison, type: poisonType, failures: OUTBOX_PUBLISH_ATTEMPTS });
  t.is(lines.filter((l) => l.level === 'warn' && l.fields.event_id === poison).length, 1);

  // The metrics: a parked row is not pending (the lag alarm does not fire for ever), it is dead.
  t.is(await metricValue(registry, 'outbox_events_dead'), 1);
  t.is(await metricValue(registry, 'outbox_events_pending'), 0);
  t.is(await metricValue(registry, 'outbox_oldest_pending_seconds'), 0);
}

test('PostgreSQL: a row the bus refuses for good is retried, then parked; later rows are published', async (t) => {
  const runtime = await openTestRuntime({ bus: 'pg' });
  t.teardown(() => runtime.dispose());
  await poisonDoesNotStall(t, runtime.db.knex, 'pgpoison');
});

test('PGlite: a row the bus refuses for good is retried, then parked; later rows are published', async (t) => {
  const db: Database = await createDatabase({ dataDir: '.', inMemory: true });
  t.teardown(() => db.close());
  await migrateAll(db.knex, [kitMigrations]);
  await poisonDoesNotStall(t, db.knex, 'litepoison');
});
