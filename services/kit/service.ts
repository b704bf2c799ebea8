import type { RequestListener, Server } from 'node:http';
import type { Express } from 'express';
import { ConfigError, exitOnConfigError, loadConfig, type ConfigShape } from './config.js';
import { loadBaseConfig, serviceUrls, type BaseConfig } from './settings/index.js';
import type { MigrationSet } from './db/migrate.js';
import type { Route } from './http/route-table.js';
import type { ServiceAppOptions } from './http/app.js';
import { parseSize } from './http/body.js';
import { serviceLogger } from './logger.js';
import { exitOnSignals, listen, markDraining, serverTimeouts, shutdownBoundMs, type RunningServer } from './lifecycle.js';
import { gatewaySecretFor, openProcessRuntime, openRuntime, type ProcessRuntime, type Runtime } from './runtime.js';

/**
 * What a service or worker declares so that the same code runs all-in-one (`npm start`) and
 * alone (`node dist/services/<name>/main.js`, one process per service in production).
 */
export interface ServiceContext<R extends ProcessRuntime = Runtime> {
  runtime: R;
  gatewaySecret: string;
  urls: ReturnType<typeof serviceUrls>;
  /**
   * All-in-one only: the request handlers of the services started in this process, by the origin
   * they listen at (`http://127.0.0.1:<port>`), so the embedded edge can skip the loopback hop.
   */
  inProcess?: Map<string, RequestListener>;
  /**
   * Registers cleanup for what this app instance started (timers, batchers, pools). It runs once,
   * after the app's server drained, in reverse order of registration. Each started service has
   * its own list, so several apps in one process (tests, `npm start`) never stop each other's work.
   */
  onStop(cleanup: () => void | Promise<void>): void;
}

/** The context a caller builds; `startService` adds the per-instance `onStop`. */
export type SharedServiceContext<R extends ProcessRuntime = Runtime> = Omit<ServiceContext<R>, 'onStop'>;

export interface ServiceDefinition<R extends ProcessRuntime = Runtime> {
  name: string;
  port(config: BaseConfig): number;
  /**
   * This service's own settings (beside the platform-wide `baseConfigShape`), declared next to its
   * code. `npm start` and a standalone start validate it before anything opens; the app parses it
   * from `ctx.runtime.config.env` with `loadConfig`.
   */
  config?: ConfigShape;
  migrations: MigrationSet[];
  /**
   * The service's routes as data, built without starting it (nothing is read from the stand-in deps
   * while the list is built): the OpenAPI document and docs/api.md are generated from it.
   */
  routeTable?(): readonly Route[];
  /** Prefixes every route is also served under (llm-api: `/llm`), for the document. */
  aliases?: string[];
  /** Keeps no state (the edge): started alone, it opens no database and no bus. */
  stateless?: R extends Runtime ? false : true;
  createApp(ctx: ServiceContext<R>): Express | Promise<Express>;
  /** Called once the server listens with the app createApp built, before it accepts traffic (the edge bounds connections per client address here). */
  onListening?(server: Server, ctx: ServiceContext<R>, app: Express): void;
}

export interface WorkerDefinition {
  name: string;
  /** The worker's own settings; see ServiceDefinition.config. */
  config?: ConfigShape;
  migrations: MigrationSet[];
  start(ctx: SharedServiceContext): Promise<{ stop(): Promise<void> }>;
}

export interface StartedService<R extends ProcessRuntime = Runtime> {
  name: string;
  server: RunningServer;
  /** The context the app was built with (its own `onStop`). */
  ctx: ServiceContext<R>;
  /** Runs the app's registered cleanups (call after `server.close`). */
  stop(): Promise<void>;
}

const URL_KEYS: Record<string, keyof ServiceContext['urls']> = {
  'llm-api': 'llmApi',
  'response-api': 'responseApi',
  'media-api': 'mediaApi',
  'mcp-tools': 'mcpTools',
};

export async function startService<R extends ProcessRuntime>(def: ServiceDefinition<R>, shared: SharedServiceContext<R>): Promise<StartedService<R>> {
  const logger = serviceLogger(shared.runtime.logger, def.name);
  const cleanups: Array<() => void | Promise<void>> = [];
  const ctx: ServiceContext<R> = { ...shared, runtime: { ...shared.runtime, logger }, onStop: (cleanup) => void cleanups.push(cleanup) };
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
    server = await listen(app, { host: ctx.runtime.config.HOST, port: def.port(ctx.runtime.config), timeouts: serverTimeouts(ctx.runtime.config), backlog: ctx.runtime.config.HTTP_LISTEN_BACKLOG });
  } catch (error) {
    await stop();
    throw error;
  }
  def.onListening?.(server.server, ctx, app);
  // With port 0 (tests) the real port is known only now; later callers read the address from here.
  const key = URL_KEYS[def.name];
  if (key && def.port(ctx.runtime.config) === 0) shared.urls[key] = `http://127.0.0.1:${server.port}`;
  logger.info({ port: server.port }, 'listening');
  return { name: def.name, server, ctx, stop };
}

/** Validates a process's own settings (`config` of its definition) against the environment. */
export function checkOwnConfig(defs: ReadonlyArray<{ config?: ConfigShape }>, env: NodeJS.ProcessEnv | Readonly<NodeJS.ProcessEnv>): void {
  for (const def of defs) if (def.config) loadConfig(def.config, env as NodeJS.ProcessEnv);
}

/**
 * What the entry point of a process started alone adds to its start (services/platform/standalone.ts
 * gives the same as `npm start`): the refusals of a production start, and the one line for a start
 * failure the operator can fix (null keeps the stack trace).
 */
export interface StandaloneChecks {
  refusals?(config: BaseConfig, uses: { database: boolean; rateLimits: boolean }): string[];
  failureLine?(error: unknown, config: BaseConfig): string | null;
}

/** Entry point of a service started alone. */
export async function runStandalone(def: ServiceDefinition<any>, checks: StandaloneChecks = {}): Promise<void> {
  let config: BaseConfig;
  let gatewaySecret: string;
  try {
    config = loadBaseConfig();
    checkOwnConfig([def], config.env);
    gatewaySecret = gatewaySecretFor(config, 'standalone');
  } catch (error) {
    exitOnConfigError(error);
  }
  const refusals = checks.refusals?.(config, { database: !def.stateless, rateLimits: def.name === 'gateway' }) ?? [];
  if (refusals.length > 0) {
    for (const line of refusals) process.stderr.write(`${line}\n`);
    process.exit(1);
  }
  try {
    await startStandalone(def, config, gatewaySecret);
  } catch (error) {
    const line = checks.failureLine ? checks.failureLine(error, config) : error instanceof ConfigError ? error.message : null;
    if (!line) throw error;
    process.stderr.write(`${line}\n`);
    process.exit(1);
  }
}

async function startStandalone(def: ServiceDefinition<any>, config: BaseConfig, gatewaySecret: string): Promise<void> {
  if (def.stateless) {
    const runtime = openProcessRuntime(config, { name: def.name });
    const started = await startService(def as ServiceDefinition<ProcessRuntime>, { runtime, gatewaySecret, urls: serviceUrls(config) });
    exitOnSignals(runtime.logger, [
      ['drain http', () => (markDraining(runtime.readiness), started.server.close(config.SHUTDOWN_TIMEOUT_MS))],
      ['stop service', () => started.stop()],
      ['close runtime', () => runtime.close()],
    ], { timeoutMs: shutdownBoundMs(config.SHUTDOWN_TIMEOUT_MS) });
    return;
  }
  const runtime = await openRuntime(config, { name: def.name, migrations: def.migrations });
  const started = await startService(def as ServiceDefinition, { runtime, gatewaySecret, urls: serviceUrls(config) });
  runtime.relay.start();
  exitOnSignals(runtime.logger, [
    ['drain http', () => (markDraining(runtime.readiness), started.server.close(config.SHUTDOWN_TIMEOUT_MS))],
    ['stop service', () => started.stop()],
    ['flush outbox', async () => void (await runtime.relay.drain().catch(() => 0))],
    ['close runtime', () => runtime.close()],
  ], { timeoutMs: shutdownBoundMs(config.SHUTDOWN_TIMEOUT_MS) });
}

/**
 * The app options every service reads the same way from its context (logger, gateway token, user
 * directory, readiness checks, default body limit and JSON depth); a service adds its route table.
 */
export function serviceAppOptions(ctx: ServiceContext, name: string): Omit<ServiceAppOptions, 'routeTable'> {
  const config = ctx.runtime.config;
  return {
    name,
    logger: ctx.runtime.logger,
    gatewaySecret: ctx.gatewaySecret,
    users: ctx.runtime.users,
    readiness: ctx.runtime.readiness,
    bodyLimit: parseSize(config.JSON_BODY_LIMIT),
    jsonMaxDepth: config.JSON_MAX_DEPTH,
    // Outbox backlog and bus consumer lag on every service's /metrics (they read the shared state).
    dataMetrics: { knex: ctx.runtime.db.knex, bus: ctx.runtime.bus, clock: ctx.runtime.clock },
  };
}
