import { randomBytes } from 'node:crypto';
import test, { type ExecutionContext } from 'ava';
import type { Knex } from 'knex';
import { catalogSyncDeps, createModelsStore, createProvidersStore, syncProvider, SyncError, type ModelListClient, type SyncDeps } from '../../../domains/catalog/index.js';
import { llmApiService } from '../../../services/llm-api/service.js';
import { createDatabase, createSecretBox, kitMigrations, ManualClock, migrateAll, type Database } from '../../../services/kit/index.js';
import { openTestRuntime } from '../../helpers/env.js';

// Two syncs of one provider side by side (two provider-sync workers, or the admin's sync beside the
// scheduled one): the one that fetched the provider's list first may commit last. Its older list
// must not overwrite the newer one. The interleaving is driven here: each fetch waits until the
// test answers it. Run on both drivers (PostgreSQL and the embedded PGlite).

interface PendingFetch {
  answer(status: number, body: unknown): void;
}

/** A model-list client whose calls wait for the test to answer them, in the order they arrived. */
function gatedClient() {
  const arrived: PendingFetch[] = [];
  const waiting: Array<(fetch: PendingFetch) => void> = [];
  const client: ModelListClient = {
    getJson: () =>
      new Promise((resolve) => {
        const fetch: PendingFetch = { answer: (status, body) => resolve({ status, body }) };
        const taker = waiting.shift();
        if (taker) taker(fetch);
        else arrived.push(fetch);
      }),
  };
  /** The next fetch to arrive (or the oldest one already waiting). */
  const next = () => new Promise<PendingFetch>((resolve) => {
    const fetch = arrived.shift();
    if (fetch) resolve(fetch);
    else waiting.push(resolve);
  });
  return { client, next };
}

const list = (...ids: string[]) => ({ object: 'list', data: ids.map((id) => ({ id, object: 'model' })) });

async function seedProvider(knex: Knex, id: string, now: number) {
  await createProvidersStore(knex).insert(knex, {
    id,
    name: id,
    vendor: 'fake',
    category: 'llm',
    base_url: 'http://upstream.invalid/v1',
    api_key_sealed: null,
    api_key_hint: null,
    active: true,
    default_provider_image_edit: false,
    default_provider_image_generate: false,
    endpoints: [],
    metadata: {},
    last_synced_at: null,
    last_sync_error: null,
    created_at: now,
    updated_at: now,
  });
}

function depsFor(knex: Knex, clock: ManualClock, client: ModelListClient): SyncDeps {
  return catalogSyncDeps({ knex, box: createSecretBox(randomBytes(32)), clock, upstream: client, modelsTimeoutMs: 5000 });
}

const activeModels = async (knex: Knex, providerId: string) =>
  (await createModelsStore(knex).providerModelsOf(providerId)).filter((pm) => pm.active).map((pm) => pm.provider_original_model_id).sort();

async function olderListNeverWins(t: ExecutionContext, knex: Knex, prefix: string) {
  const clock = new ManualClock(Date.UTC(2026, 11, 7));
  const providerId = `prov_${prefix}_race`;
  await seedProvider(knex, providerId, 1);
  const gate = gatedClient();
  const deps = depsFor(knex, clock, gate.client);
  const m = (n: number) => `${prefix}-race-m${n}`;

  // A first list: m1, m2.
  const first = syncProvider(deps, providerId);
  (await gate.next()).answer(200, list(m(1), m(2)));
  await first;
  t.deepEqual(await activeModels(knex, providerId), [m(1), m(2)]);

  // A fetches first (the provider still lists m1, m2), B fetches after (m2 gone, m3 new) and commits first.
  const a = syncProvider(deps, providerId);
  const fetchA = await gate.next();
  const b = syncProvider(deps, providerId);
  const fetchB = await gate.next();
  fetchB.answer(200, list(m(1), m(3)));
  const resultB = await b;
  t.like(resultB, { added: 1, deactivated: 1 });
  t.deepEqual(await activeModels(knex, providerId), [m(1), m(3)]);

  // A's older list arrives last: it changes nothing, says so, and emits no event.
  const eventsBefore = Number((await knex('outbox_events').count({ n: '*' }).first())!.n);
  fetchA.answer(200, list(m(1), m(2)));
  const resultA = await a;
  t.like(resultA, { added: 0, updated: 0, deactivated: 0, superseded: true });
  t.deepEqual(await activeModels(knex, providerId), [m(1), m(3)], 'the newer list stays');
  t.deepEqual(resultA.models.filter((pm) => pm.active).map((pm) => pm.provider_original_model_id).sort(), [m(1), m(3)], 'the result shows what is committed');
  t.is(Number((await knex('outbox_events').count({ n: '*' }).first())!.n), eventsBefore);

  // An older fetch that fails after a newer sync succeeded does not mark the provider failing.
  const c = syncProvider(deps, providerId);
  const fetchC = await gate.next();
  const d = syncProvider(deps, providerId);
  (await gate.next()).answer(200, list(m(1), m(3)));
  await d;
  fetchC.answer(500, { error: 'down' });
  await t.throwsAsync(c, { instanceOf: SyncError });
  t.is((await createProvidersStore(knex).byId(providerId))!.last_sync_error, null);

  // A failed fetch started later does not hold back an older successful one (nothing newer committed).
  const e = syncProvider(deps, providerId);
  const fetchE = await gate.next();
  const f = syncProvider(deps, providerId);
  (await gate.next()).answer(503, { error: 'down' });
  await t.throwsAsync(f, { instanceOf: SyncError });
  fetchE.answer(200, list(m(1), m(4)));
  t.like(await e, { added: 1, deactivated: 1 });
  t.deepEqual(await activeModels(knex, providerId), [m(1), m(4)]);

  // No clock in the comparison: with the clock set back a day, the next sync still commits.
  clock.set(clock.now() - 86_400_000);
  const g = syncProvider(deps, providerId);
  (await gate.next()).answer(200, list(m(5)));
  t.like(await g, { added: 1, deactivated: 2 });
  t.deepEqual(await activeModels(knex, providerId), [m(5)]);
}

test('PostgreSQL: an older model list committed after a newer one changes nothing', async (t) => {
  const runtime = await openTestRuntime({ migrations: llmApiService.migrations });
  t.teardown(() => runtime.dispose());
  await olderListNeverWins(t, runtime.db.knex, 'pg');

  // The commits themselves overlapping: the later sync's transaction is still open when the earlier
  // one reaches its commit. The earlier one waits for the provider's lock and then finds it superseded.
  const knex = runtime.db.knex;
  const providerId = 'prov_pg_overlap';
  await seedProvider(knex, providerId, 1);
  const gate = gatedClient();
  const deps = depsFor(knex, new ManualClock(Date.UTC(2026, 11, 7)), gate.client);
  const a = syncProvider(deps, providerId);
  const fetchA = await gate.next();
  const trx = await knex.transaction();
  const b = syncProvider(deps, providerId, trx);
  (await gate.next()).answer(200, list('pg-overlap-new'));
  t.like(await b, { added: 1 });
  fetchA.answer(200, list('pg-overlap-old'));
  const pendingA = a.then((result) => ({ result, committedFirst: trx.isCompleted() }));
  await trx.commit();
  const { result, committedFirst } = await pendingA;
  t.true(committedFirst, 'the earlier sync waited for the later one to commit');
  t.like(result, { added: 0, deactivated: 0, superseded: true });
  t.deepEqual(await activeModels(knex, providerId), ['pg-overlap-new']);
});

test('PGlite: an older model list committed after a newer one changes nothing', async (t) => {
  const db: Database = await createDatabase({ dataDir: '.', inMemory: true });
  t.teardown(() => db.close());
  await migrateAll(db.knex, [kitMigrations, ...llmApiService.migrations]);
  await olderListNeverWins(t, db.knex, 'lite');
});
