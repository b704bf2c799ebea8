import type { Migration, MigrationSet, Route, ServiceContext } from '../kit/index.js';
import type { LlmApiDeps } from './deps.js';

/**
 * One folder per resource (identity, conversations, projects, providers, models, chat, webhooks…),
 * each exporting a LlmApiResource: its migrations and its routes as data. Every route is reachable
 * under both `/v1/...` and `/llm/v1/...`, so a resource declares paths without the `/llm` prefix.
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
  /**
   * The resource's routes as data. `deps` is the app's composition root (deps.ts); take the narrow
   * part you need in the type (`deps: { projects: ProjectDeps }`) and read it only inside handlers,
   * so the OpenAPI generator can build the list without starting anything.
   */
  routes(deps: LlmApiDeps): Route[];
  /**
   * Work the resource needs before the app answers (a registry to load, a key to ensure) and
   * background work it starts; what it starts is stopped through `ctx.onStop`.
   */
  start?(deps: LlmApiDeps, ctx: ServiceContext): void | Promise<void>;
}
