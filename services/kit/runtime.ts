import { randomBytes } from 'node:crypto';
import { createBus, type Bus } from './bus/index.js';
import { systemClock, type Clock } from './clock.js';
import { ConfigError } from './config.js';
import type { BaseConfig } from './settings/index.js';
import { createDatabase, type Database } from './db/database.js';
import { tuneHeapForRequests } from './heap-tuning.js';
import { migrateAll, type MigrationSet } from './db/migrate.js';
import { createUserDirectory, type UserDirectory } from './identity/directory.js';
import { createUsersStore } from './identity/users-store.js';
import { createLogger, type Logger } from './logger.js';
import { kitMigrations } from './migrations/index.js';
import { createOutboxRelay, type OutboxRelay } from './outbox/outbox.js';
import { USER_REVOCATION_PREFIX, createInProcessRevocations, revocationChannelFor, type RevocationChannel } from './revocations.js';
import { createRedisRevocations } from './revocations-redis.js';

/**
 * What every process has, whether or not it keeps state: settings, logs, time, and credential
 * revocations for edge caches (Redis pub/sub when REDIS_URL is set, so many edge nodes hear them;
 * else in-process). The edge started alone needs nothing more.
 */
export interface ProcessRuntime {
  config: BaseConfig;
  logger: Logger;
  clock: Clock;
  revocations: RevocationChannel;
  readiness: Record<string, () => Promise<void>>;
  close(): Promise<void>;
}

/**
 * The shared dependencies of a process that keeps state: database (migrated), bus, user directory,
 * outbox relay. The all-in-one start opens one runtime for every service (PGlite allows one opener
 * per data dir); a service started alone opens its own. Drivers are chosen here by configuration only.
 */
export interface Runtime extends ProcessRuntime {
  db: Database;
  bus: Bus;
  users: UserDirectory;
  relay: OutboxRelay;
}

/** Redis pub/sub on the deployment's channel (named by EDGE_REDIS_PREFIX) when REDIS_URL is set, else in-process. */
function openRevocations(config: BaseConfig, logger: Logger): RevocationChannel {
  if (!config.REDIS_URL) return createInProcessRevocations();
  return createRedisRevocations(config.REDIS_URL, { channel: revocationChannelFor(config.EDGE_REDIS_PREFIX), logger });
}

/** A runtime without database or bus, for a stateless process (the edge started alone). */
export function openProcessRuntime(config: BaseConfig, options: { name: string; clock?: Clock; logger?: Logger }): ProcessRuntime {
  tuneHeapForRequests();
  const logger = options.logger ?? createLogger({ level: config.LOG_LEVEL, name: options.name });
  const revocations = openRevocations(config, logger);
  return {
    config,
    logger,
    clock: options.clock ?? systemClock,
    revocations,
    readiness: {},
    close: () => revocations.close(),
  };
}

export async function openRuntime(
  config: BaseConfig,
  options: { name: string; migrations: MigrationSet[]; clock?: Clock; logger?: Logger },
): Promise<Runtime> {
  tuneHeapForRequests();
  const logger = options.logger ?? createLogger({ level: config.LOG_LEVEL, name: options.name });
  const clock = options.clock ?? systemClock;
  const db = await createDatabase({
    url: config.DATABASE_URL,
    dataDir: config.DATA_DIR,
    schema: config.DATABASE_SCHEMA,
    poolMax: config.DATABASE_POOL_MAX,
    queryTimeoutMs: config.DATABASE_QUERY_TIMEOUT_MS,
    connectTimeoutMs: config.DATABASE_CONNECT_TIMEOUT_MS,
    embeddedBuffersMb: config.DATABASE_EMBEDDED_BUFFERS_MB,
    embeddedPreparedStatements: config.DATABASE_EMBEDDED_PREPARED_STATEMENTS,
    logger,
  });
  try {
    await migrateAll(db.knex, [kitMigrations, ...options.migrations]);
  } catch (error) {
    await db.close();
    throw error;
  }
  // Polls that exist for other processes' writes back off while idle where there are none.
  const idlePollMaxMs = db.soleClient && config.EMBEDDED_IDLE_POLL_MAX_MS > 0 ? config.EMBEDDED_IDLE_POLL_MAX_MS : undefined;
  const bus = await createBus({
    amqpUrl: config.AMQP_URL,
    exchange: config.BUS_EXCHANGE,
    queuePrefix: config.BUS_QUEUE_PREFIX,
    prefetch: config.BUS_PREFETCH,
    pollMs: config.BUS_POLL_MS,
    idlePollMaxMs,
    knex: db.knex,
    clock,
    logger,
  }).catch(async (error) => {
    await db.close();
    throw error;
  });
  const users = createUserDirectory(createUsersStore(db.knex), { ttlMs: config.IDENTITY_CACHE_TTL_MS, clock });
  const relay = createOutboxRelay({ knex: db.knex, bus, clock, logger, pollMs: config.OUTBOX_POLL_MS, idlePollMaxMs, retentionMs: config.OUTBOX_RETENTION_HOURS * 3_600_000 });
  logger.info({ database: db.driver, bus: bus.driver }, 'runtime ready');
  const revocations = openRevocations(config, logger);
  // A user disabled or changed in another process reaches this process's user cache at once.
  // Not awaited: an unreachable Redis must not stop a service from starting (the cache TTL still bounds staleness).
  const userSubscription = revocations
    .subscribe({
      onRevoked(message) {
        if (message.startsWith(USER_REVOCATION_PREFIX)) users.invalidate(message.slice(USER_REVOCATION_PREFIX.length));
      },
      onResync: () => users.invalidate(),
    })
    .catch((error: Error) => {
      logger.warn({ err: error.message }, 'user revocations unavailable; relying on the identity cache TTL');
      return async () => {};
    });
  return {
    config,
    logger,
    clock,
    db,
    bus,
    users,
    relay,
    revocations,
    readiness: { database: () => db.ping(), bus: () => bus.ping() },
    async close() {
      await relay.stop();
      // The channel first: closing it disconnects the subscriber, which ends a subscribe still
      // waiting on a Redis that never answered (its catch above turns that into a no-op). Waiting on
      // the subscription first would wait forever for that Redis, and the start's one line with it.
      await revocations.close();
      await (await userSubscription)();
      await bus.close();
      await db.close();
    },
  };
}

/**
 * The gateway secret a process uses. The all-in-one start generates one in memory when unset;
 * a service started alone refuses to start without it (a direct caller could forge identity).
 */
export function gatewaySecretFor(config: BaseConfig, mode: 'all-in-one' | 'standalone'): string {
  if (config.GATEWAY_SHARED_SECRET) return config.GATEWAY_SHARED_SECRET;
  if (mode === 'all-in-one') return randomBytes(32).toString('base64url');
  throw new ConfigError('GATEWAY_SHARED_SECRET', 'required when a service runs on its own (variable is not set)');
}
