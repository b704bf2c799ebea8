import type { Router } from 'express';
import type { Migration, ServiceContext } from '../kit/index.js';

/**
 * One folder per resource (identity, conversations, projects, providers, models, chat, webhooks…),
 * each exporting a LlmApiResource: its migrations and a function that mounts its routes.
 * Routes are mounted under both `/v1/...` and `/llm/v1/...` by service.ts, so a resource mounts
 * paths without the `/llm` prefix. `stop` flushes background work on shutdown.
 */
export interface LlmApiResource {
  name: string;
  migrations: Migration[];
  /** Paths (without `/llm`) reachable without identity headers. */
  publicPaths?: RegExp[];
  /** Per-route body rules (limits, pass-through). */
  bodyRules?: import('../kit/index.js').BodyRule[];
  mount(router: Router, ctx: ServiceContext): void | Promise<void>;
  stop?(): Promise<void>;
}
