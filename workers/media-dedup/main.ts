import { exitOnSignals, openRuntime, serviceUrls, shutdownBoundMs } from '../../services/kit/index.js';
import { runWorkerAlone } from '../../services/platform/standalone.js';
import { mediaDedupWorker } from './index.js';

// The media-dedup worker on its own (production: one or more processes beside media-api).
await runWorkerAlone(mediaDedupWorker, async (config) => {
  const runtime = await openRuntime(config, { name: 'media-dedup', migrations: mediaDedupWorker.migrations });
  const worker = await mediaDedupWorker.start({ runtime, gatewaySecret: '', urls: serviceUrls(config) });
  runtime.relay.start();
  exitOnSignals(runtime.logger, [
    ['stop worker', () => worker.stop()],
    ['flush outbox', async () => void (await runtime.relay.drain().catch(() => 0))],
    ['close runtime', () => runtime.close()],
  ], { timeoutMs: shutdownBoundMs(config.SHUTDOWN_TIMEOUT_MS) });
});
