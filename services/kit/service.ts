import type { Express } from 'express';
import { exitOnConfigError, loadBaseConfig, serviceUrls, type BaseConfig } from './config.js';
import type { MigrationSet } from './db/migrate.js';
import { exitOnSignals, listen, type RunningServer } from './lifecycle.js';
import { gatewaySecretFor, openRuntime, type Runtime } from './runtime.js';

/**
 * What a service or worker declares so that the same code runs all-in-one (`npm start`) and
 * alone (`node dist/services/<name>/main.js`, one process per service in production).
 */
export interface ServiceContext {
  runtime: Runtime;
  gatewaySecret: string;
  urls: ReturnType<typeof serviceUrls>;
  /**
   * Registers cleanup for what this app instance started (timers, batchers, pools). It runs once,
   * after the app's server drained, in reverse order of registration. Each started service has
   * its own list, so several apps in one process (tests, `npm start`) never stop each other's work.
   */
  onStop(cleanup: () => void | Promise<void>): void;
}

/** The context a caller builds; `startService` adds the per-instance `onStop`. */
export type SharedServiceContext = Omit<ServiceContext, 'onStop'>;

export interface ServiceDefinition {
  name: string;
  port(config: BaseConfig): number;
  migrations: MigrationSet[];
  createApp(ctx: ServiceContext): Express | Promise<Express>;
}

export interface WorkerDefinition {
  name: string;
  migrations: MigrationSet[];
  start(ctx: SharedServiceContext): Promise<{ stop(): Promise<void> }>;
}

export interface StartedService {
  name: string;
  server: RunningServer;
  /** The context the app was built with (its own `onStop`). */
  ctx: ServiceContext;
  /** Runs the app's registered cleanups (call after `server.close`). */
  stop(): Promise<void>;
}

const URL_KEYS: Record<string, keyof ServiceContext['urls']> = {
  'llm-api': 'llmApi',
  'response-api': 'responseApi',
  'media-api': 'mediaApi',
  'mcp-tools': 'mcpTools',
};

export async function startService(def: ServiceDefinition, shared: SharedServiceContext): Promise<StartedService> {
  const logger = shared.runtime.logger.child({ service: def.name });
  const cleanups: Array<() => void | Promise<void>> = [];
  const ctx: ServiceContext = { ...shared, runtime: { ...shared.runtime, logger }, onStop: (cleanup) => void cleanups.push(cleanup) };
  const stop = async () => {
    for (const cleanup of cleanups.splice(0).reverse()) {
      try {
        await cleanup();
      } catch (error) {
        logger.error({ err: (error as Error).message }, 'cleanup failed');
      }
    }
  };
  let app: Express;
  let server: RunningServer;
  try {
    app = await def.createApp(ctx);
    server = await listen(app, { host: ctx.runtime.config.HOST, port: def.port(ctx.runtime.config) });
  } catch (error) {
    await stop();
    throw error;
  }
  // With port 0 (tests) the real port is known only now; later callers read the address from here.
  const key = URL_KEYS[def.name];
  if (key && def.port(ctx.runtime.config) === 0) shared.urls[key] = `http://127.0.0.1:${server.port}`;
  logger.info({ port: server.port }, 'listening');
  return { name: def.name, server, ctx, stop };
}

/** Entry point of a service started alone. */
export async function runStandalone(def: ServiceDefinition): Promise<void> {
  let config: BaseConfig;
  let gatewaySecret: string;
  try {
    config = loadBaseConfig();
    gatewaySecret = gatewaySecretFor(config, 'standalone');
  } catch (error) {
    exitOnConfigError(error);
  }
  const runtime = await openRuntime(config, { name: def.name, migrations: def.migrations });
  const started = await startService(def, { runtime, gatewaySecret, urls: serviceUrls(config) });
  runtime.relay.start();
  exitOnSignals(runtime.logger, [
    ['drain http', () => started.server.close(config.SHUTDOWN_TIMEOUT_MS)],
    ['stop service', () => started.stop()],
    ['flush outbox', async () => void (await runtime.relay.drain().catch(() => 0))],
    ['close runtime', () => runtime.close()],
  ]);
}
