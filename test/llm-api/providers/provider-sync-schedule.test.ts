import { Writable } from 'node:stream';
import test from 'ava';
import { pino } from 'pino';
import { ManualClock, migrateAll, type SharedServiceContext } from '../../../services/kit/index.js';
import { providerSyncWorker } from '../../../workers/provider-sync/index.js';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';
import { waitFor } from '../../helpers/wait.js';

// LLM_PROVIDER_SYNC_INTERVAL_MS is the platform's schedule, not each process's: with several
// provider-sync workers on one database, one of them syncs per interval and the others skip.
// The clock stands still, so the interval never passes again: exactly one scheduled pass syncs,
// however often the workers' timers fire.
let h: LlmHarness;
let fake: FakeUpstream;
const clock = new ManualClock(Date.now());

test.before(async () => {
  fake = await startFakeUpstream({ name: 'sched', models: [{ id: 'm1' }] });
  h = await startLlmHarness({ LLM_PROVIDER_SYNC_INTERVAL_MS: '25' }, { clock });
  // The worker's own tables (a worker started in llm-api's runtime, as here, has not migrated them).
  await migrateAll(h.service.runtime.db.knex, providerSyncWorker.migrations);
});
test.after.always(async () => {
  await h?.close();
  await fake?.close();
});

/** `ctx` with a logger of its own (debug), whose lines the test reads. */
function withLog(ctx: SharedServiceContext) {
  const lines: Array<Record<string, unknown>> = [];
  const sink = new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(line));
      done();
    },
  });
  return { lines, ctx: { ...ctx, runtime: { ...ctx.runtime, logger: pino({ level: 'debug' }, sink) } } as SharedServiceContext };
}

const SKIPPED = 'scheduled provider sync skipped: another process ran it this interval';

test('two provider-sync workers on one database: one scheduled pass per interval, not one per process', async (t) => {
  const created = await h.call('POST', '/v1/admin/providers', { name: 'Sched', vendor: 'fake', base_url: fake.url });
  t.is(created.status, 201, JSON.stringify(created.body));
  const listed = () => fake.requests.filter((r) => r.path.endsWith('/models')).length;
  const before = listed();

  const a = withLog(h.service.ctx);
  const b = withLog(h.service.ctx);
  const workers = [await providerSyncWorker.start(a.ctx), await providerSyncWorker.start(b.ctx)];
  try {
    // Every timer fire either lists the provider's models or is logged as skipped: wait for 8 fires,
    // and (unless a second pass synced) for each worker to have skipped one.
    const skips = (lines: Array<Record<string, unknown>>) => lines.filter((l) => l.msg === SKIPPED).length;
    await waitFor(
      async () => {
        const synced = listed() - before;
        return synced + skips(a.lines) + skips(b.lines) >= 8 && (synced > 1 || (skips(a.lines) > 0 && skips(b.lines) > 0));
      },
      30_000,
      '8 scheduled passes',
    );
    t.is(listed() - before, 1, 'one pass listed the models');
  } finally {
    await Promise.all(workers.map((w) => w.stop()));
  }
});
