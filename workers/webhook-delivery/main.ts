import { exitOnSignals, openRuntime, serviceUrls, shutdownBoundMs } from '../../services/kit/index.js';
import { runWorkerAlone } from '../../services/platform/standalone.js';
import { webhookDeliveryWorker } from './index.js';

/** Runs the webhook delivery worker alone (one or more processes beside the services). */
await runWorkerAlone(webhookDeliveryWorker, async (config) => {
  const runtime = await openRuntime(config, { name: webhookDeliveryWorker.name, migrations: webhookDeliveryWorker.migrations });
  // The worker serves no HTTP; the gateway secret is not used.
  const worker = await webhookDeliveryWorker.start({ runtime, gatewaySecret: config.GATEWAY_SHARED_SECRET ?? '', urls: serviceUrls(config) });
  runtime.logger.info({ worker: webhookDeliveryWorker.name }, 'webhook delivery worker started');
  exitOnSignals(runtime.logger, [
    ['stop worker', () => worker.stop()],
    ['close runtime', () => runtime.close()],
  ], { timeoutMs: shutdownBoundMs(config.SHUTDOWN_TIMEOUT_MS) });
});
