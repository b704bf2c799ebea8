import type { MigrationSet } from '../db/migrate.js';
import { coreTables } from './20261122_0001_kit_core.js';
import { outboxParking } from './20261207_0002_kit_outbox_parking.js';

/** The kit's own tables: users (shared identity), the outbox and the embedded bus. Always first. */
export const kitMigrations: MigrationSet = { owner: 'kit', migrations: [coreTables, outboxParking] };
