import test from 'ava';
import { createSyncRunsStore } from '../../../domains/catalog/index.js';
import { MAX_HANDLER_FAILURES, newId, unixSeconds, type Bus, type BusMessage, type Delivery, type MessageHandler, type SharedServiceContext } from '../../../services/kit/index.js';
import { providerSyncWorker } from '../../../workers/provider-sync/index.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';

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

/** Feeds `first` to the handler until it acks or dead-letters it, each retry carrying the headers it set. */
async function untilSettled(handle: MessageHandler<unknown>, first: BusMessage<unknown>, max: number) {
  const outcomes: string[] = [];
  let message = first;
  for (let round = 0; round < max; round++) {
    let next: Record<string, string> | undefined;
    const delivery: Delivery = {
      ack: async () => void outcomes.push('ack'),
      retryAfter: async (_delayMs, headers) => {
        outcomes.push('retry');
        next = { ...message.headers, ...headers };
      },
      deadLetter: async () => void outcomes.push('dead'),
    };
    await handle(message, delivery);
    if (!next) break;
    message = { ...message, headers: next };
  }
  return outcomes;
}

test('a sync message that always fails is dead-lettered after MAX_HANDLER_FAILURES attempts and its run ends failed', async (t) => {
  const runs = createSyncRunsStore(h.service.runtime.db.knex);
  const runId = newId('syncRun');
  await runs.insert({ id: runId, provider_id: null, status: 'queued', created_at: unixSeconds(h.service.runtime.clock) });
  const { ctx, handler } = capturing(h.service.ctx);
  const worker = await providerSyncWorker.start(ctx);
  try {
    // A provider id PostgreSQL cannot compare (a NUL byte): the provider lookup fails every time.
    const message: BusMessage<unknown> = { id: runId, routingKey: 'llm.provider-sync', body: { provider_id: 'prov_\u0000', run_id: runId }, headers: {}, redelivered: false };
    const outcomes = await untilSettled(handler(), message, MAX_HANDLER_FAILURES * 3);
    t.deepEqual(outcomes, [...Array<string>(MAX_HANDLER_FAILURES - 1).fill('retry'), 'dead']);
    t.like(await runs.byId(runId), { status: 'failed', error: 'the run kept failing and was abandoned (see the provider-sync log)' });
  } finally {
    await worker.stop();
  }
});

test('a run interrupted by a database error shows a generic message while it waits for its retry, never the SQL', async (t) => {
  const runs = createSyncRunsStore(h.service.runtime.db.knex);
  const runId = newId('syncRun');
  await runs.insert({ id: runId, provider_id: null, status: 'queued', created_at: unixSeconds(h.service.runtime.clock) });
  const { ctx, handler } = capturing(h.service.ctx);
  const worker = await providerSyncWorker.start(ctx);
  try {
    const message: BusMessage<unknown> = { id: runId, routingKey: 'llm.provider-sync', body: { provider_id: 'prov_\u0000', run_id: runId }, headers: {}, redelivered: false };
    t.deepEqual(await untilSettled(handler(), message, 1), ['retry']);
    const view = await h.call('GET', `/v1/admin/providers/sync/${runId}`);
    t.is(view.status, 200);
    t.like(view.body, { status: 'queued', error: 'interrupted by an unexpected error (see the provider-sync log); retrying in 30 s' });
  } finally {
    await worker.stop();
  }
});
