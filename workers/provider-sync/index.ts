import type { SharedServiceContext, WorkerDefinition } from '../../services/kit/index.js';
import { syncDepsFor, upstreamFor } from '../../services/llm-api/routing/core.js';
import { PROVIDER_SYNC_QUEUE, syncProvider, SyncError } from '../../services/llm-api/providers/sync.js';

/**
 * provider-sync: re-synchronises every active provider's models on a schedule
 * (LLM_PROVIDER_SYNC_INTERVAL_MS; 0 turns the schedule off) and on demand — a message on the
 * `llm.provider-sync` queue (`{provider_id?}`; without an id: all active providers), which
 * `POST /v1/admin/providers/sync` sends. Sync adds new models, deactivates vanished ones and never
 * touches manually updated fields; events go through the outbox. llm-api processes notice the
 * change through the catalog version (LLM_CATALOG_POLL_MS).
 */
export { PROVIDER_SYNC_QUEUE };

export interface SyncRunSummary {
  synced: string[];
  failed: Array<{ provider_id: string; error: string }>;
}

export async function syncAllProviders(ctx: SharedServiceContext, deps: ReturnType<typeof syncDepsFor>, providerId?: string): Promise<SyncRunSummary> {
  const providers = providerId ? [await deps.providers.byId(providerId)].filter(Boolean) : (await deps.providers.list()).filter((p) => p.active);
  const summary: SyncRunSummary = { synced: [], failed: [] };
  for (const provider of providers) {
    try {
      const result = await syncProvider(deps, provider!.id);
      summary.synced.push(provider!.id);
      if (result.added || result.updated || result.deactivated) {
        ctx.runtime.logger.info({ provider_id: provider!.id, added: result.added, updated: result.updated, deactivated: result.deactivated }, 'provider models synchronised');
      }
    } catch (error) {
      summary.failed.push({ provider_id: provider!.id, error: (error as Error).message });
      if (!(error instanceof SyncError)) ctx.runtime.logger.error({ err: error, provider_id: provider!.id }, 'provider sync failed');
      else ctx.runtime.logger.warn({ provider_id: provider!.id, err: error.message }, 'provider sync failed');
    }
  }
  return summary;
}

export const providerSyncWorker: WorkerDefinition = {
  name: 'provider-sync',
  migrations: [],
  async start(ctx) {
    const config = ctx.runtime.config;
    const upstream = upstreamFor(config);
    const deps = syncDepsFor(ctx, upstream);
    let timer: NodeJS.Timeout | undefined;
    let running: Promise<unknown> = Promise.resolve();
    const run = (providerId?: string) => (running = running.then(() => syncAllProviders(ctx, deps, providerId)));

    if (config.LLM_PROVIDER_SYNC_INTERVAL_MS > 0) {
      const tick = () => {
        timer = setTimeout(() => void run().finally(() => timer && tick()), config.LLM_PROVIDER_SYNC_INTERVAL_MS);
        timer.unref();
      };
      tick();
    }
    const consumer = await ctx.runtime.bus.consume<{ provider_id?: string }>({ queue: PROVIDER_SYNC_QUEUE, prefetch: 1 }, async (message, delivery) => {
      try {
        await run(typeof message.body?.provider_id === 'string' ? message.body.provider_id : undefined);
        await delivery.ack();
      } catch (error) {
        ctx.runtime.logger.error({ err: (error as Error).message }, 'on-demand provider sync failed; retrying in 30 s');
        await delivery.retryAfter(30_000);
      }
    });
    return {
      async stop() {
        clearTimeout(timer);
        timer = undefined;
        await consumer.cancel();
        await running.catch(() => {});
        await upstream.close().catch(() => {});
      },
    };
  },
};
