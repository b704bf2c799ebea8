import type { RequestListener } from 'node:http';
import {
  checkOwnConfig,
  exitOnSignals,
  shutdownBoundMs,
  markDraining,
  gatewaySecretFor,
  loadBaseConfig,
  openRuntime,
  serviceUrls,
  startService,
  type BaseConfig,
  type Clock,
  type Logger,
  type SharedServiceContext,
  type StartedService,
} from '../kit/index.js';
import { lockDataDir } from './data-dir-lock.js';
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

export async function startPlatform(config: BaseConfig = loadBaseConfig(), options: { clock?: Clock; logger?: Logger } = {}): Promise<Platform> {
  const all = [...services, ...edge, ...workers];
  checkOwnConfig(all, config.env);
  const gatewaySecret = gatewaySecretFor(config, 'all-in-one');
  // The embedded database lives in DATA_DIR and belongs to one process.
  const lock = config.DATABASE_URL ? null : lockDataDir(config.DATA_DIR);
  let runtime: Awaited<ReturnType<typeof openRuntime>>;
  try {
    runtime = await openRuntime(config, {
      name: 'platform',
      migrations: all.flatMap((d) => d.migrations),
      clock: options.clock,
      logger: options.logger,
    });
  } catch (error) {
    lock?.release();
    throw error;
  }
  const inProcess = new Map<string, RequestListener>();
  const ctx: SharedServiceContext = { runtime, gatewaySecret, urls: serviceUrls(config), inProcess };
  const started: StartedService[] = [];
  const running: { stop(): Promise<void> }[] = [];
  try {
    for (const def of [...services, ...edge]) {
      const service = await startService(def, ctx);
      started.push(service);
      // The edge, started last, reaches these at 127.0.0.1:<port> (or localhost) unless configured elsewhere.
      const handler = service.server.server.listeners('request')[0] as RequestListener;
      for (const host of ['127.0.0.1', 'localhost']) inProcess.set(`http://${host}:${service.server.port}`, handler);
    }
    for (const worker of workers) running.push(await worker.start(ctx));
  } catch (error) {
    for (const s of started.reverse()) {
      await s.server.close(0);
      await s.stop();
    }
    for (const r of running) await r.stop();
    await runtime.close();
    lock?.release();
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
      // One deadline for every server: each is closed with what the ones before it left, so the
      // whole drain takes at most SHUTDOWN_TIMEOUT_MS (a server still open keeps serving its
      // in-flight requests meanwhile), not that once per server.
      const deadline = runtime.clock.now() + config.SHUTDOWN_TIMEOUT_MS;
      markDraining(runtime.readiness);
      // The edge first, so no new work reaches the services, then the services, then background work.
      for (const s of [...started].reverse()) await s.server.close(Math.max(0, deadline - runtime.clock.now()));
      for (const s of [...started].reverse()) await s.stop();
      for (const r of running) await r.stop();
      await runtime.relay.drain().catch(() => 0);
      await runtime.close();
      lock?.release();
    },
  };
}

/** Stops the platform on SIGTERM / SIGINT; returns the same stop for a request that is not a signal. */
export function stopOnSignals(platform: Platform): (reason: string) => void {
  const bound = shutdownBoundMs(platform.ctx.runtime.config.SHUTDOWN_TIMEOUT_MS);
  return exitOnSignals(platform.ctx.runtime.logger, [['stop platform', () => platform.stop()]], { timeoutMs: bound });
}
