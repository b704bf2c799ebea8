import OpenAI from 'openai';
import { startPlatform as startAllInOne, type Platform } from '../../services/platform/platform.js';
import { edgeMetricsUrl } from '../../services/gateway/service.js';
import type { Clock, Logger, Runtime, ServiceContext } from '../../services/kit/index.js';
import { deleteAmqpTopology } from './amqp.js';
import { dropSchema, testConfig } from './env.js';
import { deleteRedisKeys } from './redis.js';

/**
 * The whole platform for end-to-end tests: every service, the workers and the embedded edge
 * (deck/kong.yaml) on free ports over an isolated runtime (own schema, exchange, Redis prefix).
 * Clients talk to `url` (the edge) exactly as they would in production, e.g. with the `openai` SDK:
 *   const p = await startTestPlatform();
 *   const client = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: key });
 *   ...; await p.stop();
 * Edge rate limits are raised far out of the way unless `env` sets them (EDGE_RATE_LIMIT_*).
 */
export interface TestPlatform {
  /** The edge's base URL, e.g. http://127.0.0.1:40123 (append /v1 or /llm/v1). */
  url: string;
  runtime: Runtime;
  ctx: ServiceContext;
  platform: Platform;
  gatewaySecret: string;
  /** Direct (internal) address of a service: 'llm-api', 'response-api', 'media-api', 'mcp-tools'. */
  serviceUrl(name: string): string;
  /** The base URL of the edge's metrics listener (it serves `/metrics`), apart from the public `url`. */
  metricsUrl: string;
  stop(): Promise<void>;
}

const HIGH = '100000000';
const RELAXED_LIMITS: Record<string, string> = {
  EDGE_RATE_LIMIT_IP_PER_MINUTE: HIGH,
  EDGE_RATE_LIMIT_FREE_PER_MINUTE: HIGH,
  EDGE_RATE_LIMIT_FREE_PER_DAY: HIGH,
  EDGE_RATE_LIMIT_PRO_PER_MINUTE: HIGH,
  EDGE_RATE_LIMIT_PRO_PER_DAY: HIGH,
  EDGE_GUEST_LOGIN_PER_HOUR: HIGH,
};

export async function startTestPlatform(
  options: { env?: Record<string, string | undefined>; clock?: Clock; bus?: 'amqp' | 'pg'; logger?: Logger } = {},
): Promise<TestPlatform> {
  // TEST_EDGE_TRANSPORT=http: the edge reaches the services over loopback HTTP instead of in process
  // (the edge suites run under both; see test/e2e/*.http.test.ts).
  const transport = process.env.TEST_EDGE_TRANSPORT === 'http' ? { EDGE_IN_PROCESS_DISPATCH: 'false' } : {};
  const redisPrefix = `edge_${process.pid}_${Date.now().toString(36)}`;
  const config = testConfig({ EDGE_REDIS_PREFIX: redisPrefix, ...RELAXED_LIMITS, ...transport, ...options.env }, { bus: options.bus });
  const platform = await startAllInOne(config, { clock: options.clock, logger: options.logger });
  const url = `http://127.0.0.1:${platform.port('gateway')}`;
  // Domain objects a test builds from `ctx` stop with the platform.
  const cleanups: Array<() => void | Promise<void>> = [];
  const ctx: ServiceContext = { ...platform.ctx, onStop: (cleanup) => void cleanups.push(cleanup) };
  return {
    url,
    runtime: platform.ctx.runtime,
    ctx,
    platform,
    gatewaySecret: platform.ctx.gatewaySecret,
    serviceUrl: (name) => `http://127.0.0.1:${platform.port(name)}`,
    metricsUrl: edgeMetricsUrl(platform.started.find((s) => s.name === 'gateway')!.ctx) ?? '',
    async stop() {
      await platform.stop();
      for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
      await dropSchema(config.DATABASE_SCHEMA!);
      if (config.AMQP_URL) await deleteAmqpTopology(config.BUS_QUEUE_PREFIX, config.BUS_EXCHANGE);
      if (config.REDIS_URL) await deleteRedisKeys(config.env.EDGE_REDIS_PREFIX ?? redisPrefix);
    },
  };
}

/** Same as startTestPlatform (the name the team brief uses). */
export const startPlatform = startTestPlatform;

/** An `openai` SDK client that authenticates at the edge with the API key `key` (no bearer token). */
export function keyClient(p: TestPlatform, key: string): OpenAI {
  return new OpenAI({ baseURL: `${p.url}/v1`, apiKey: 'unused', maxRetries: 0, defaultHeaders: { 'X-API-Key': key, Authorization: null } });
}

/**
 * The bootstrap administrator (its API key `adminKey`) through the edge: its client, with the fake
 * upstream at `upstreamUrl` added as provider "Alpha", and the ids of the administrator and its key.
 */
export async function bootstrapAdmin(p: TestPlatform, adminKey: string, upstreamUrl: string): Promise<{ client: OpenAI; providerId: string; adminId: string; keyId: string }> {
  const client = keyClient(p, adminKey);
  const provider: any = await client.post('/admin/providers', { body: { name: 'Alpha', vendor: 'fake', base_url: upstreamUrl } });
  const knex = p.runtime.db.knex;
  const adminId = (await knex('users').where({ is_admin: true }).first()).id as string;
  const keyId = (await knex('identity_api_keys').where({ user_id: adminId }).first()).id as string;
  return { client, providerId: provider.id as string, adminId, keyId };
}
