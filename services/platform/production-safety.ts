import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { z } from 'zod';
import { loadConfig, type BaseConfig } from '../kit/index.js';

/**
 * What `npm start` refuses with NODE_ENV=production, and what it reports it generated. Each refusal
 * is one line naming the setting to fix, or the `PRODUCTION_ALLOW` entry that accepts it knowingly.
 */
const ALLOWANCES = ['pglite', 'local-rate-limits', 'generated-gateway-secret', 'generated-master-key'] as const;
type Allowance = (typeof ALLOWANCES)[number];

export const productionSafetyShape = {
  /** Comma-separated: what a production start may use anyway (see README). */
  PRODUCTION_ALLOW: z
    .string()
    .default('')
    .transform((v) => v.split(',').map((s) => s.trim()).filter(Boolean))
    .pipe(z.array(z.enum(ALLOWANCES, { error: `each entry must be one of ${ALLOWANCES.join(', ')}` }))),
};

/** What this start would generate or fall back to, from the configuration alone. */
export function startupFallbacks(config: BaseConfig): Record<Allowance, boolean> {
  return {
    pglite: !config.DATABASE_URL,
    'local-rate-limits': !config.REDIS_URL,
    'generated-gateway-secret': !config.GATEWAY_SHARED_SECRET,
    'generated-master-key': !config.MASTER_KEY && !existsSync(resolve(config.DATA_DIR, 'master.key')),
  };
}

const REFUSALS: Record<Allowance, string> = {
  pglite: 'refusing to start: NODE_ENV=production with the embedded PGlite database; set DATABASE_URL to a PostgreSQL server (or PRODUCTION_ALLOW=pglite)',
  'local-rate-limits':
    'refusing to start: NODE_ENV=production with in-process rate-limit counters (each process counts alone); set REDIS_URL (or PRODUCTION_ALLOW=local-rate-limits)',
  'generated-gateway-secret':
    'refusing to start: NODE_ENV=production with a generated GATEWAY_SHARED_SECRET (it changes at every start); set GATEWAY_SHARED_SECRET (or PRODUCTION_ALLOW=generated-gateway-secret)',
  'generated-master-key':
    'refusing to start: NODE_ENV=production would generate MASTER_KEY (provider keys sealed with a key only this disk holds); set MASTER_KEY (or PRODUCTION_ALLOW=generated-master-key)',
};

/** The refusal lines for a production start (empty outside production or when all is set or allowed). */
export function productionRefusals(config: BaseConfig): string[] {
  if (config.NODE_ENV !== 'production') return [];
  const allowed = new Set(loadConfig(productionSafetyShape, config.env as NodeJS.ProcessEnv).PRODUCTION_ALLOW);
  const fallbacks = startupFallbacks(config);
  return ALLOWANCES.filter((a) => fallbacks[a] && !allowed.has(a)).map((a) => REFUSALS[a]);
}

/**
 * The rate limiter's fault policy this start's edge gets: `DECK_RATE_LIMIT_FAULT_POLICY` when set
 * (it wins over the edge's own setting, as for every DECK_* variable), else
 * `EDGE_RATE_LIMIT_FAULT_POLICY`, else the default, `deny`.
 */
export function rateLimitFaultPolicy(env: Readonly<NodeJS.ProcessEnv>): string {
  return env.DECK_RATE_LIMIT_FAULT_POLICY || env.EDGE_RATE_LIMIT_FAULT_POLICY || 'deny';
}

/**
 * What a production start warns about without refusing it: choices an operator may make knowingly,
 * against the platform's rule of denying when in doubt. One line each, naming the setting.
 */
export function productionWarnings(config: BaseConfig): string[] {
  if (config.NODE_ENV !== 'production') return [];
  const warnings: string[] = [];
  if (rateLimitFaultPolicy(config.env) === 'allow') {
    warnings.push(
      'warning: EDGE_RATE_LIMIT_FAULT_POLICY=allow: while Redis is down or slow the edge serves every request uncounted, with no rate limit at all (guest creation per hour included); the default, deny, answers 503 instead',
    );
  }
  return warnings;
}

/**
 * The lines `npm start` prints once up: where to connect, what it generated (never the values), and
 * the production warnings.
 */
export function startupSummary(config: BaseConfig, url: string, fallbacks: Record<Allowance, boolean>): string[] {
  const lines = [`platform ready: ${url} (OpenAI-compatible base URL ${url}/v1)`];
  if (fallbacks.pglite) lines.push(`database: embedded PGlite under ${config.DATA_DIR} (set DATABASE_URL for PostgreSQL)`);
  if (fallbacks['local-rate-limits']) lines.push('rate limits: counted in this process (set REDIS_URL to share them)');
  if (fallbacks['generated-gateway-secret']) lines.push('generated: GATEWAY_SHARED_SECRET (in memory, new at every start)');
  if (fallbacks['generated-master-key']) lines.push(`generated: MASTER_KEY (written to ${resolve(config.DATA_DIR, 'master.key')}; back it up)`);
  lines.push(...productionWarnings(config));
  return lines;
}
