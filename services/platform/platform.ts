import {
  exitOnSignals,
  gatewaySecretFor,
  loadBaseConfig,
  openRuntime,
  serviceUrls,
  startService,
  type BaseConfig,
  type Clock,
  type SharedServiceContext,
  type StartedService,
} from '../kit/index.js';
import { edge, services, workers } from './registry.js';

/**
 * The all-in-one platform: one runtime (database, bus, outbox relay) shared by every service,
 * worker and the edge, each service on its own port. Used by `npm start` and by end-to-end tests.
 */
export interface Platform {
  ctx: SharedServiceContext;
  started: StartedService[];
  port(name: string): number;
  stop(): Promise<void>;
}

export async function startPlatform(config: BaseConfig = loadBaseConfig(), options: { clock?: Clock } = {}): Promise<Platform> {
  const gatewaySecret = gatewaySecretFor(config, 'all-in-one');
  const all = [...services, ...edge, ...workers];
  const runtime = await openRuntime(config, {
    name: 'platform',
    migrations: all.flatMap((d) => d.migrations),
    clock: options.clock,
  });
  const ctx: SharedServiceContext = { runtime, gatewaySecret, urls: serviceUrls(config) };
  const started: StartedService[] = [];
  const running: { stop(): Promise<void> }[] = [];
  try {
    for (const def of [...services, ...edge]) started.push(await startService(def, ctx));
    for (const worker of workers) running.push(await worker.start(ctx));
  } catch (error) {
    for (const s of started.reverse()) {
      await s.server.close(0);
      await s.stop();
    }
    for (const r of running) await r.stop();
    await runtime.close();
    throw error;
  }
  runtime.relay.start();

  return {
    ctx,
    started,
    port(name) {
      const found = started.find((s) => s.name === name);
      if (!found) throw new Error(`no service ${name}`);
      return found.server.port;
    },
    async stop() {
      const timeout = config.SHUTDOWN_TIMEOUT_MS;
      // The edge first, so no new work reaches the services, then the services, then background work.
      for (const s of [...started].reverse()) await s.server.close(timeout);
      for (const s of [...started].reverse()) await s.stop();
      for (const r of running) await r.stop();
      await runtime.relay.drain().catch(() => 0);
      await runtime.close();
    },
  };
}

export function stopOnSignals(platform: Platform): void {
  exitOnSignals(platform.ctx.runtime.logger, [['stop platform', () => platform.stop()]]);
}
