import { exitOnSignals, openRuntime, serviceUrls, shutdownBoundMs } from '../../services/kit/index.js';
import { runWorkerAlone } from '../../services/platform/standalone.js';
import { providerSyncWorker } from './index.js';

// The provider-sync worker on its own (production: one process beside llm-api; more are harmless).
await runWorkerAlone(providerSyncWorker, async (config) => {
  const runtime = await openRuntime(config, { name: providerSyncWorker.name, migrations: providerSyncWorker.migrations });
  const worker = await providerSyncWorker.start({ runtime, gatewaySecret: '', urls: serviceUrls(config) });
  runtime.relay.start();
  exitOnSignals(runtime.logger, [
    ['stop worker', () => worker.stop()],
    ['flush outbox', async () => void (await runtime.relay.drain().catch(() => 0))],
    ['close runtime', () => runtime.close()],
  ], { timeoutMs: shutdownBoundMs(config.SHUTDOWN_TIMEOUT_MS) });
});
