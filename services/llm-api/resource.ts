import type { Router } from 'express';
import type { Migration, MigrationSet, ServiceContext } from '../kit/index.js';

/**
 * One folder per resource (identity, conversations, projects, providers, models, chat, webhooks…),
 * each exporting a LlmApiResource: its migrations and a function that mounts its routes.
 * Routes are mounted under both `/v1/...` and `/llm/v1/...` by service.ts, so a resource mounts
 * paths without the `/llm` prefix. Background work a resource starts is registered with
 * `ctx.onStop` in `mount`, so it ends with this app instance.
 */
export interface LlmApiResource {
  name: string;
  /** Migrations kept in llm-api's history (`migrations_llm_api`). */
  migrations: Migration[];
  /**
   * Tables shared with a process that runs without llm-api (a worker started alone) keep their own
   * history instead, so both processes migrate the same set exactly once.
   */
  ownMigrations?: MigrationSet;
  /** Paths (without `/llm`) reachable without identity headers. */
  publicPaths?: RegExp[];
  /** Per-route body rules (limits, pass-through). */
  bodyRules?: import('../kit/index.js').BodyRule[];
  mount(router: Router, ctx: ServiceContext): void | Promise<void>;
}
