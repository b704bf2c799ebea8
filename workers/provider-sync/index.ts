import {
  catalogConfigShape,
  catalogSyncDeps,
  createModelListClient,
  createSyncRunsStore,
  loadCatalogConfig,
  PROVIDER_SYNC_QUEUE,
  syncProvider,
  SyncError,
  type ModelListClient,
  type SyncDeps,
} from '../../domains/catalog/index.js';
import { afterHandlerFailure, createEgressGuard, createSecretBox, HANDLER_FAILURES_HEADER, loadMasterKey, runEvery, unixSeconds, type BaseConfig, type SharedServiceContext, type WorkerDefinition } from '../../services/kit/index.js';
import { createSyncScheduleStore, providerSyncMigrations } from './schedule.js';

/**
 * provider-sync: re-synchronises every active provider's models on a schedule
 * (LLM_PROVIDER_SYNC_INTERVAL_MS; 0 turns the schedule off) and on demand — a message on the
 * `llm.provider-sync` queue (`{provider_id?}`; without an id: all active providers), which
 * `POST /v1/admin/providers/sync` sends with the id of the run it recorded (`run_id`): the run goes
 * running → succeeded | failed with the counts, and a redelivered message for a finished run is
 * acknowledged without running again; a run a stopping worker cut short (it stops after the provider
 * in flight) goes back to the queue, queued again. Sync adds new models, deactivates vanished ones and never
 * touches manually updated fields; events go through the outbox. llm-api processes notice the
 * change through the catalog version (LLM_CATALOG_POLL_MS). The schedule is the platform's: with
 * several processes, one of them syncs per interval (schedule.ts). Two syncs of one provider that
 * still meet (two workers' on-demand runs, or the admin's inline sync) cannot let the list fetched
 * first overwrite a later one: the commit checks the sync's generation (the catalog's sync.ts), and a
 * superseded sync changes nothing.
 */
export { PROVIDER_SYNC_QUEUE };

export interface SyncRunSummary {
  synced: string[];
  failed: Array<{ provider_id: string; error: string }>;
  added: number;
  updated: number;
  deactivated: number;
  /**
   * Set when the pass stopped before every provider was synchronised (the worker is stopping): the
   * providers not reached are left for the next pass, or, for an on-demand run, for its retry.
   */
  interrupted?: true;
}

/** The worker's own model-list client, guarded like every provider call (PROVIDER_URL_ALLOW). */
export function modelListClientFor(platform: BaseConfig) {
  const config = loadCatalogConfig(platform.env);
  return createModelListClient({
    connectTimeoutMs: config.LLM_UPSTREAM_CONNECT_TIMEOUT_MS,
    httpVersion: config.LLM_UPSTREAM_HTTP_VERSION,
    guard: createEgressGuard({ allowHosts: config.PROVIDER_URL_ALLOW, exclusive: true }),
  });
}

export function syncDepsFor(ctx: SharedServiceContext, client: ModelListClient): SyncDeps {
  const { config, db, clock } = ctx.runtime;
  const box = createSecretBox(loadMasterKey(config));
  return catalogSyncDeps({ knex: db.knex, box, clock, upstream: client, modelsTimeoutMs: loadCatalogConfig(config.env).LLM_MODELS_TIMEOUT_MS });
}

const UNEXPECTED = 'model sync failed: unexpected error (see the provider-sync log)';
const INTERRUPTED = 'interrupted by an unexpected error (see the provider-sync log); retrying in 30 s';
const ABANDONED = 'the run kept failing and was abandoned (see the provider-sync log)';
const NOTHING_SYNCED = { providers_synced: 0, providers_failed: 0, added: 0, updated: 0, deactivated: 0 };

/**
 * Synchronises one provider or every active one, one after another. `stopping` is asked before each
 * provider: once it answers true, no further provider starts (a stop waits for one provider's sync,
 * not a whole pass) and the summary says `interrupted`.
 */
export async function syncAllProviders(ctx: SharedServiceContext, deps: SyncDeps, providerId?: string, stopping: () => boolean = () => false): Promise<SyncRunSummary> {
  const providers = providerId ? [await deps.providers.byId(providerId)].filter(Boolean) : (await deps.providers.list()).filter((p) => p.active);
  const summary: SyncRunSummary = { synced: [], failed: [], added: 0, updated: 0, deactivated: 0 };
  if (providerId && providers.length === 0) summary.failed.push({ provider_id: providerId, error: 'the provider no longer exists' });
  for (const provider of providers) {
    if (stopping()) {
      summary.interrupted = true;
      break;
    }
    try {
      const result = await syncProvider(deps, provider!.id);
      summary.synced.push(provider!.id);
      summary.added += result.added;
      summary.updated += result.updated;
      summary.deactivated += result.deactivated;
      // Another sync of this provider (another worker, the admin's) fetched its list after this one and committed first.
      if (result.superseded) ctx.runtime.logger.info({ provider_id: provider!.id }, 'provider sync superseded by a later one; its older model list was dropped');
      if (result.added || result.updated || result.deactivated) {
        ctx.runtime.logger.info({ provider_id: provider!.id, added: result.added, updated: result.updated, deactivated: result.deactivated }, 'provider models synchronised');
      }
      if (result.skipped.length) {
        ctx.runtime.logger.warn({ provider_id: provider!.id, skipped: result.skipped.length, models: result.skipped.slice(0, 20) }, 'provider model entries skipped');
      }
    } catch (error) {
      // A SyncError's message is written for API answers; anything else (a database error, whose
      // message may quote the SQL) is named only in the log.
      summary.failed.push({ provider_id: provider!.id, error: error instanceof SyncError ? error.message : UNEXPECTED });
      if (!(error instanceof SyncError)) ctx.runtime.logger.error({ err: error, provider_id: provider!.id }, 'provider sync failed');
      else ctx.runtime.logger.warn({ provider_id: provider!.id, err: error.detail }, 'provider sync failed');
    }
  }
  return summary;
}

export const providerSyncWorker: WorkerDefinition = {
  name: 'provider-sync',
  config: catalogConfigShape,
  migrations: [providerSyncMigrations],
  async start(ctx) {
    const config = loadCatalogConfig(ctx.runtime.config.env);
    const upstream = modelListClientFor(ctx.runtime.config);
    const deps = syncDepsFor(ctx, upstream);
    const runs = createSyncRunsStore(ctx.runtime.db.knex);
    const schedules = createSyncScheduleStore(ctx.runtime.db.knex);
    let running: Promise<unknown> = Promise.resolve();
    let stopping = false;
    // Scheduled passes and on-demand messages share one chain, so two syncs never run at once.
    const run = (providerId?: string) => {
      const next = running.then(() => syncAllProviders(ctx, deps, providerId, () => stopping));
      running = next.catch(() => {});
      return next;
    };

    const consumer = await ctx.runtime.bus.consume<{ provider_id?: string; run_id?: string }>({ queue: PROVIDER_SYNC_QUEUE, prefetch: 1 }, async (message, delivery) => {
      const providerId = typeof message.body?.provider_id === 'string' ? message.body.provider_id : undefined;
      const runId = typeof message.body?.run_id === 'string' ? message.body.run_id : undefined;
      try {
        if (runId && !(await runs.start(runId, unixSeconds(ctx.runtime.clock)))) {
          await delivery.ack(); // already finished: a redelivery
          return;
        }
        const summary = await run(providerId);
        if (summary.interrupted) {
          // The worker is stopping: the run goes back to the queue, handed over while this channel
          // still holds its message (a redelivery later would race a run still in progress here).
          if (runId) await runs.requeue(runId, 'interrupted by a worker stop; retrying');
          await delivery.retryAfter(0);
          return;
        }
        if (runId) {
          const error = summary.failed.length ? summary.failed.map((f) => `${f.provider_id}: ${f.error}`).join('; ') : null;
          await runs.finish(
            runId,
            { providers_synced: summary.synced.length, providers_failed: summary.failed.length, added: summary.added, updated: summary.updated, deactivated: summary.deactivated, failures: summary.failed, error },
            unixSeconds(ctx.runtime.clock),
          );
        }
        await delivery.ack();
      } catch (error) {
        // Counted as the bus counts a handler that throws: a message failing MAX_HANDLER_FAILURES
        // times in a row (not because the database or the bus is away) is a poison message, dead-
        // lettered with its run failed, instead of re-running every provider's sync every 30 s for ever.
        const { failures, deadLetter } = afterHandlerFailure(message.headers, error);
        if (deadLetter) {
          ctx.runtime.logger.error({ err: (error as Error)?.message, run_id: runId, failures }, 'on-demand provider sync keeps failing; moved to dead letters');
          // A run that did finish (its message kept failing to settle) keeps its outcome.
          const abandon = async (id: string) => {
            const current = await runs.byId(id);
            if (current && current.status !== 'succeeded' && current.status !== 'failed') await runs.finish(id, { ...NOTHING_SYNCED, failures: [], error: ABANDONED }, unixSeconds(ctx.runtime.clock));
          };
          if (runId) await abandon(runId).catch(() => {});
          await delivery.deadLetter();
          return;
        }
        ctx.runtime.logger.error({ err: (error as Error)?.message, failures }, 'on-demand provider sync failed; retrying in 30 s');
        // The admin's view of the run says what happened, not the error itself: a database error's
        // message holds its SQL and values, which belong in the log only (as for a provider's failure).
        if (runId) await runs.requeue(runId, INTERRUPTED).catch(() => {});
        await delivery.retryAfter(30_000, { [HANDLER_FAILURES_HEADER]: String(failures) });
      }
    });
    // Scheduled passes start once the consumer is up (a failed start leaves no timer behind).
    // A failed scheduled pass (the database away, say) is logged and the next one tries again;
    // it never becomes an unhandled rejection that ends the process.
    const schedule =
      config.LLM_PROVIDER_SYNC_INTERVAL_MS > 0
        ? runEvery(
            config.LLM_PROVIDER_SYNC_INTERVAL_MS,
            async () => {
              if (stopping) return;
              if (!(await schedules.claim('models', ctx.runtime.clock.now(), config.LLM_PROVIDER_SYNC_INTERVAL_MS))) {
                ctx.runtime.logger.debug('scheduled provider sync skipped: another process ran it this interval');
                return;
              }
              await run();
            },
            (error) => ctx.runtime.logger.error({ err: error }, 'scheduled provider sync failed'),
          )
        : undefined;
    return {
      async stop() {
        // No further scheduled pass (stop cancels the timer at once), then no further message;
        // then the pass in progress, whichever started it, ends after the provider it is
        // synchronising (a whole pass could outlast the drain), before the client closes.
        // The message of an on-demand run in flight is settled when it ends, acked or (cut short)
        // sent back to the queue with its run queued again: on RabbitMQ a channel closed under it
        // would hand it to another worker while this one still ran the same sync.
        stopping = true;
        const scheduleStopped = schedule?.stop();
        await consumer.cancel({ drainMs: config.LLM_MODELS_TIMEOUT_MS + 5000 });
        await scheduleStopped;
        await running.catch(() => {});
        await upstream.close().catch(() => {});
      },
    };
  },
};
