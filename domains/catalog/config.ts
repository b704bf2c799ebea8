import { z } from 'zod';
import { csv, destinationList, loadConfig } from '../../services/kit/index.js';

/**
 * Settings of the model catalog, shared by llm-api and the provider-sync worker (README.md "LLM API"
 * table): where provider URLs may point, how model lists are fetched, how often they are re-read.
 */
export const catalogConfigShape = {
  /**
   * Where provider URLs (model sync, chat upstreams) may point: host names, IP addresses or CIDR
   * ranges. Empty: the egress guard's rules (public addresses only). Set: only these destinations.
   */
  PROVIDER_URL_ALLOW: csv.superRefine((entries, ctx) => {
    try {
      destinationList(entries);
    } catch (error) {
      ctx.addIssue({ code: 'custom', message: (error as Error).message });
    }
  }),
  LLM_UPSTREAM_CONNECT_TIMEOUT_MS: z.coerce.number().int().min(1).default(5000),
  /** '2': provider connections speak HTTP/2 only, several requests on each; 'auto': HTTP/2 where TLS negotiates it (provider-connections.ts). */
  LLM_UPSTREAM_HTTP_VERSION: z.enum(['1.1', '2', 'auto']).default('1.1'),
  LLM_MODELS_TIMEOUT_MS: z.coerce.number().int().min(1).default(15000),
  /** How often each llm-api process checks whether the catalog changed elsewhere. */
  LLM_CATALOG_POLL_MS: z.coerce.number().int().min(0).default(2000),
  LLM_PROVIDER_SYNC_INTERVAL_MS: z.coerce.number().int().min(0).default(3600000),
};

export type CatalogConfig = z.infer<z.ZodObject<typeof catalogConfigShape>>;

export const loadCatalogConfig = (env: NodeJS.ProcessEnv | Readonly<NodeJS.ProcessEnv>): CatalogConfig =>
  loadConfig(catalogConfigShape, env as NodeJS.ProcessEnv);
