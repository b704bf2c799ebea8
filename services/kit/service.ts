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
}

export interface ServiceDefinition {
  name: string;
  port(config: BaseConfig): number;
  migrations: MigrationSet[];
  createApp(ctx: ServiceContext): Express | Promise<Express>;
  /** Flushes and stops background work owned by the app (batchers, caches); runs after the server drained. */
  stop?(): Promise<void>;
}

export interface WorkerDefinition {
  name: string;
  migrations: MigrationSet[];
  start(ctx: ServiceContext): Promise<{ stop(): Promise<void> }>;
}

export interface StartedService {
  name: string;
  server: RunningServer;
}

const URL_KEYS: Record<string, keyof ServiceContext['urls']> = {
  'llm-api': 'llmApi',
  'response-api': 'responseApi',
  'media-api': 'mediaApi',
  'mcp-tools': 'mcpTools',
};

export async function startService(def: ServiceDefinition, ctx: ServiceContext): Promise<StartedService> {
  const logger = ctx.runtime.logger.child({ service: def.name });
  const app = await def.createApp({ ...ctx, runtime: { ...ctx.runtime, logger } });
  const server = await listen(app, { host: ctx.runtime.config.HOST, port: def.port(ctx.runtime.config) });
  // With port 0 (tests) the real port is known only now; later callers read the address from here.
  const key = URL_KEYS[def.name];
  if (key && def.port(ctx.runtime.config) === 0) ctx.urls[key] = `http://127.0.0.1:${server.port}`;
  logger.info({ port: server.port }, 'listening');
  return { name: def.name, server };
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
  const ctx: ServiceContext = { runtime, gatewaySecret, urls: serviceUrls(config) };
  const started = await startService(def, ctx);
  runtime.relay.start();
  exitOnSignals(runtime.logger, [
    ['drain http', () => started.server.close(config.SHUTDOWN_TIMEOUT_MS)],
    ['stop service', async () => def.stop?.()],
    ['flush outbox', async () => void (await runtime.relay.drain().catch(() => 0))],
    ['close runtime', () => runtime.close()],
  ]);
}
