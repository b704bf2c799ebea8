import { randomBytes } from 'node:crypto';
import knexFactory from 'knex';
import { deleteAmqpTopology } from './amqp.js';
import {
  loadBaseConfig,
  openRuntime,
  startService,
  serviceUrls,
  type BaseConfig,
  type Clock,
  type MigrationSet,
  type Runtime,
  type ServiceContext,
  type SharedServiceContext,
  type ServiceDefinition,
} from '../../services/kit/index.js';

/**
 * Isolation per test file: each runtime gets its own PostgreSQL schema, its own exchange and
 * queue prefix on RabbitMQ, and its own Redis prefix (the edge's keys, and the revocation channel
 * it names: with REDIS_URL, runtimes of other files never hear this one's revocations). The
 * servers are the real ones on this machine; `npm test` makes sure they run.
 */
import { TEST_AMQP_URL, TEST_DATABASE_URL } from './servers.js';

export { TEST_AMQP_URL, TEST_DATABASE_URL, TEST_REDIS_URL } from './servers.js';

export function uniqueName(prefix: string): string {
  return `${prefix}_${process.pid}_${randomBytes(4).toString('hex')}`;
}

/** A validated config for a test: real PostgreSQL (own schema) and, unless `bus: 'pg'`, real RabbitMQ. */
export function testConfig(overrides: Record<string, string | undefined> = {}, options: { bus?: 'amqp' | 'pg' } = {}): BaseConfig {
  const name = uniqueName('t');
  return loadBaseConfig({
    NODE_ENV: 'test',
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    DATABASE_URL: TEST_DATABASE_URL,
    DATABASE_SCHEMA: name,
    DATABASE_POOL_MAX: '5',
    AMQP_URL: options.bus === 'pg' ? undefined : TEST_AMQP_URL,
    BUS_EXCHANGE: `${name}.events`,
    BUS_QUEUE_PREFIX: `${name}.`,
    EDGE_REDIS_PREFIX: name,
    BUS_POLL_MS: '20',
    OUTBOX_POLL_MS: '20',
    GATEWAY_SHARED_SECRET: randomBytes(32).toString('base64url'),
    GATEWAY_PORT: '0',
    LLM_API_PORT: '0',
    RESPONSE_API_PORT: '0',
    MEDIA_API_PORT: '0',
    MCP_TOOLS_PORT: '0',
    // Fake LLM upstreams listen on loopback, which provider URLs may reach only when listed.
    PROVIDER_URL_ALLOW: '127.0.0.1',
    ...overrides,
  });
}

/** Opens a runtime on an isolated schema; `dispose` closes it and drops the schema. */
export async function openTestRuntime(options: {
  migrations?: MigrationSet[];
  clock?: Clock;
  bus?: 'amqp' | 'pg';
  env?: Record<string, string | undefined>;
} = {}): Promise<Runtime & { dispose(): Promise<void> }> {
  const config = testConfig(options.env, { bus: options.bus });
  const runtime = await openRuntime(config, { name: 'test', migrations: options.migrations ?? [], clock: options.clock });
  return Object.assign(runtime, {
    async dispose() {
      await runtime.close().catch(() => {});
      await dropSchema(config.DATABASE_SCHEMA!);
      if (config.AMQP_URL) await deleteAmqpTopology(config.BUS_QUEUE_PREFIX, config.BUS_EXCHANGE);
    },
  });
}

export async function dropSchema(schema: string): Promise<void> {
  const admin = knexFactory({ client: 'pg', connection: TEST_DATABASE_URL, pool: { min: 0, max: 1 } });
  try {
    await admin.raw('drop schema if exists ?? cascade', [schema]);
  } finally {
    await admin.destroy();
  }
}

export interface TestService {
  url: string;
  runtime: Runtime;
  /** The service's own context (domain objects built from it stop with the service). */
  ctx: ServiceContext;
  gatewaySecret: string;
  /** Drains the server and runs the app's cleanups (flushes), leaving the runtime open for assertions. */
  stop(): Promise<void>;
  close(): Promise<void>;
}

/** Starts one service on a free port over a fresh isolated runtime. */
export async function startTestService(
  def: ServiceDefinition,
  options: { clock?: Clock; bus?: 'amqp' | 'pg'; env?: Record<string, string | undefined> } = {},
): Promise<TestService> {
  const runtime = await openTestRuntime({ migrations: def.migrations, clock: options.clock, bus: options.bus, env: options.env });
  const gatewaySecret = runtime.config.GATEWAY_SHARED_SECRET!;
  const ctx: SharedServiceContext = { runtime, gatewaySecret, urls: serviceUrls(runtime.config) };
  const started = await startService(def, ctx);
  runtime.relay.start();
  const stop = async () => {
    await started.server.close(1000);
    await started.stop();
  };
  return {
    url: `http://127.0.0.1:${started.server.port}`,
    runtime,
    ctx: started.ctx,
    gatewaySecret,
    stop,
    async close() {
      await stop();
      await runtime.dispose();
    },
  };
}
