import test from 'ava';
import { createSyncRunsStore } from '../../../domains/catalog/index.js';
import { MAX_HANDLER_FAILURES, newId, unixSeconds, type Bus, type BusMessage, type MessageHandler, type SharedServiceContext } from '../../../services/kit/index.js';
import { providerSyncWorker } from '../../../workers/provider-sync/index.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';
import { untilSettled } from '../../helpers/settle.js';

// An on-demand sync message that fails every time for a reason other than an outage (a poison
// message) is dead-lettered after the bus's MAX_HANDLER_FAILURES, with its run failed, instead of
// being retried every 30 s for ever. The worker's handler is driven directly, as the bus would.
let h: LlmHarness;

test.before(async () => {
  h = await startLlmHarness({ LLM_PROVIDER_SYNC_INTERVAL_MS: '0' });
});
test.after.always(async () => {
  await h?.close();
});

/** The worker's context with a bus that hands the test the consumer's handler. */
function capturing(ctx: SharedServiceContext) {
  let handler: MessageHandler<unknown> | undefined;
  const bus = { consume: async (_options: unknown, h: MessageHandler<unknown>) => ((handler = h), { cancel: async () => {} }) } as unknown as Bus;
  return { ctx: { ...ctx, runtime: { ...ctx.runtime, bus } } as SharedServiceContext, handler: () => handler! };
}

/**
 * A queued run and the worker started with a capturing bus; `body` gets the run's id, its sync
 * message (for a provider id PostgreSQL cannot compare, a NUL byte: the provider lookup fails every
 * time) and the consumer's handler. The worker is stopped afterwards.
 */
async function withFailingRun(body: (run: { runId: string; message: BusMessage<unknown>; handle: MessageHandler<unknown>; runs: ReturnType<typeof createSyncRunsStore> }) => Promise<void>) {
  const runs = createSyncRunsStore(h.service.runtime.db.knex);
  const runId = newId('syncRun');
  await runs.insert({ id: runId, provider_id: null, status: 'queued', created_at: unixSeconds(h.service.runtime.clock) });
  const { ctx, handler } = capturing(h.service.ctx);
  const worker = await providerSyncWorker.start(ctx);
  try {
    const message: BusMessage<unknown> = { id: runId, routingKey: 'llm.provider-sync', body: { provider_id: 'prov_\u0000', run_id: runId }, headers: {}, redelivered: false };
    await body({ runId, message, handle: handler(), runs });
  } finally {
    await worker.stop();
  }
}

test('a sync message that always fails is dead-lettered after MAX_HANDLER_FAILURES attempts and its run ends failed', (t) =>
  withFailingRun(async ({ runId, message, handle, runs }) => {
    const outcomes = await untilSettled(handle, message, MAX_HANDLER_FAILURES * 3);
    t.deepEqual(outcomes, [...Array<string>(MAX_HANDLER_FAILURES - 1).fill('retry'), 'dead']);
    t.like(await runs.byId(runId), { status: 'failed', error: 'the run kept failing and was abandoned (see the provider-sync log)' });
  }));

test('a run interrupted by a database error shows a generic message while it waits for its retry, never the SQL', (t) =>
  withFailingRun(async ({ runId, message, handle }) => {
    t.deepEqual(await untilSettled(handle, message, 1), ['retry']);
    const view = await h.call('GET', `/v1/admin/providers/sync/${runId}`);
    t.is(view.status, 200);
    t.like(view.body, { status: 'queued', error: 'interrupted by an unexpected error (see the provider-sync log); retrying in 30 s' });
  }));
