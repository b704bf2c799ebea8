import test from 'ava';
import { createOutboxRelay, ManualClock, recordEvent, type Bus } from '../../services/kit/index.js';
import { openTestRuntime } from '../helpers/env.js';
import { waitFor } from '../helpers/wait.js';

// The outbox keeps a published event for OUTBOX_RETENTION_HOURS, then deletes it; an event not yet
// published is never deleted. Time is the relay's clock (a manual one here).
const HOUR = 3_600_000;
const clock = new ManualClock(Date.now());
let runtime: Awaited<ReturnType<typeof openTestRuntime>>;

test.before(async () => {
  runtime = await openTestRuntime({ clock, bus: 'pg', env: { OUTBOX_RETENTION_HOURS: '2' } });
});
test.after.always(async () => {
  await runtime?.dispose();
});

const rowsOf = async (type: string) => (await runtime.db.knex('outbox_events').where({ type }).orderBy('seq').select('id', 'published_at')) as Array<{ id: string; published_at: Date | null }>;

test.serial('published events go once older than the retention; unpublished ones stay, however old', async (t) => {
  const knex = runtime.db.knex;
  const relay = createOutboxRelay({ knex, bus: runtime.bus, clock, logger: runtime.logger, pollMs: HOUR, retentionMs: HOUR });
  const type = 'retention.basic';
  for (let i = 0; i < 3; i++) await recordEvent(knex, type, { n: i });
  t.is(await relay.drain(), 3);
  t.true((await rowsOf(type)).every((r) => r.published_at !== null));

  clock.advance(HOUR - 1000);
  t.is(await relay.prune(), 0, 'still within the retention');
  const later = await recordEvent(knex, type, { n: 3 });
  t.is(await relay.drain(), 1);
  const pending = await recordEvent(knex, type, { n: 4 }); // never published

  clock.advance(2000);
  t.is(await relay.prune(), 3);
  t.deepEqual((await rowsOf(type)).map((r) => r.id), [later, pending]);

  clock.advance(10 * HOUR);
  t.is(await relay.prune(), 1);
  const left = await rowsOf(type);
  t.deepEqual(left.map((r) => r.id), [pending]);
  t.is(left[0]!.published_at, null);
  // Still published when the broker takes it, late as it is.
  t.is(await relay.drain(), 1);
});

test.serial('prune deletes in batches until nothing old is left', async (t) => {
  const knex = runtime.db.knex;
  const relay = createOutboxRelay({ knex, bus: runtime.bus, clock, logger: runtime.logger, pollMs: HOUR, retentionMs: HOUR });
  const type = 'retention.many';
  const publishedAt = new Date(clock.now() - 2 * HOUR);
  const rows = Array.from({ length: 2500 }, (_, i) => ({ id: `evt_retention_many_${i}`, type, data: '{}', published_at: publishedAt }));
  for (let i = 0; i < rows.length; i += 500) await knex('outbox_events').insert(rows.slice(i, i + 500));
  t.is(await relay.prune(), 2500);
  t.deepEqual(await rowsOf(type), []);
});

test.serial('a started relay prunes on its own schedule; OUTBOX_RETENTION_HOURS sets the runtime relay\'s retention', async (t) => {
  const knex = runtime.db.knex;
  const type = 'retention.scheduled';
  // A bus that accepts everything: only the pruning is looked at here.
  const bus = { publish: async () => {} } as unknown as Bus;
  const relay = createOutboxRelay({ knex, bus, clock, logger: runtime.logger, pollMs: HOUR, retentionMs: HOUR, pruneEveryMs: 20 });
  await recordEvent(knex, type, { n: 1 });
  t.is(await relay.drain(), 1);
  clock.advance(HOUR + 1000);
  relay.start();
  try {
    await waitFor(async () => (await rowsOf(type)).length === 0, 10_000, 'the scheduled prune');
  } finally {
    await relay.stop();
  }
  t.deepEqual(await rowsOf(type), [], 'the published row past its retention was deleted by the schedule');

  // The runtime's relay (what services start) keeps published events for the configured 2 hours.
  const kept = 'retention.runtime';
  await recordEvent(knex, kept, { n: 1 });
  t.is(await relay.drain(), 1);
  clock.advance(HOUR + 1000);
  t.is(await runtime.relay.prune(), 0);
  t.is((await rowsOf(kept)).length, 1);
  clock.advance(HOUR);
  t.is(await runtime.relay.prune(), 1);
  t.deepEqual(await rowsOf(kept), []);
});
