/**
 * kit/data: state. The database (PostgreSQL or embedded PGlite) and migrations, the bus (RabbitMQ
 * or the PostgreSQL-backed queue), the outbox that publishes events written in a transaction, and
 * the secret box for values sealed at rest.
 */
export * from '../db/database.js';
export { DEFAULT_EMBEDDED_PREPARED_STATEMENTS } from '../db/pglite-remote.js';
export * from '../db/migrate.js';
export * from '../db/column-arrays.js';
export { vacuumWhereDue, type VacuumPass } from '../db/embedded-vacuum.js';
export * from '../bus/index.js';
export * from '../outbox/outbox.js';
export { kitMigrations } from '../migrations/index.js';
export * from '../crypto-box.js';
export * from '../batch-writer.js';
export { registerDataMetrics } from '../data-metrics.js';
