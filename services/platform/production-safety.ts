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

/** The placeholder text deploy/example.env gives every secret: never a production value. */
const PLACEHOLDER = 'change-me';
const SECRET_NAME = /SECRET|PASSWORD|MASTER_KEY|API_KEY|TOKEN|_URL$/;

/**
 * Refusals no `PRODUCTION_ALLOW` entry accepts: a secret still holding the example placeholder
 * (named, never printed), and a `TRUSTED_PROXIES` range that trusts every address (any client
 * could then choose the address its per-IP limits count).
 */
function unsafeSettings(config: BaseConfig): string[] {
  const lines: string[] = [];
  for (const [name, value] of Object.entries(config.env)) {
    if (SECRET_NAME.test(name) && value?.toLowerCase().includes(PLACEHOLDER)) {
      lines.push(`refusing to start: NODE_ENV=production with ${name} still holding the "${PLACEHOLDER}" placeholder of deploy/example.env; set ${name} to a secret of your own`);
    }
  }
  const everyone = config.TRUSTED_PROXIES.filter((entry) => /\/0+$/.test(entry));
  if (everyone.length > 0) {
    lines.push(`refusing to start: NODE_ENV=production with TRUSTED_PROXIES containing ${everyone.join(', ')} (every address is trusted to name the client); list only your proxies' addresses in TRUSTED_PROXIES`);
  }
  return lines;
}

/** The refusal lines for a production start (empty outside production or when all is set or allowed). */
export function productionRefusals(config: BaseConfig, applies: ReadonlySet<Allowance> = new Set(ALLOWANCES)): string[] {
  if (config.NODE_ENV !== 'production') return [];
  const allowed = new Set(loadConfig(productionSafetyShape, config.env as NodeJS.ProcessEnv).PRODUCTION_ALLOW);
  const fallbacks = startupFallbacks(config);
  return [...ALLOWANCES.filter((a) => applies.has(a) && fallbacks[a] && !allowed.has(a)).map((a) => REFUSALS[a]), ...unsafeSettings(config)];
}

/**
 * The refusals for a service or worker started alone (deploy/compose): those of its own settings.
 * One with a database refuses PGlite and a generated MASTER_KEY; the edge refuses in-process rate
 * limits. (A generated GATEWAY_SHARED_SECRET does not arise: a process alone requires the setting.)
 */
export function standaloneRefusals(config: BaseConfig, uses: { database: boolean; rateLimits: boolean }): string[] {
  const applies = new Set<Allowance>();
  if (uses.database) applies.add('pglite').add('generated-master-key');
  if (uses.rateLimits) applies.add('local-rate-limits');
  return productionRefusals(config, applies);
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
  const env = config.env;
  if (env.DECK_RATE_LIMIT_POLICY === 'local') {
    warnings.push(
      'warning: DECK_RATE_LIMIT_POLICY=local: each process and each Kong node counts rate limits alone, so with several of them a client gets the limit once per process; set REDIS_URL and leave DECK_RATE_LIMIT_POLICY unset (or redis)',
    );
  }
  if (isTrue(env.GUEST_LOGIN_ENABLED) && !env.GUEST_ALLOWED_MODELS?.trim()) {
    warnings.push('warning: GUEST_LOGIN_ENABLED=true with GUEST_ALLOWED_MODELS empty: anonymous guests may use every model; list the models guests may use in GUEST_ALLOWED_MODELS');
  }
  if (isTrue(env.LOG_PROMPTS)) {
    warnings.push("warning: LOG_PROMPTS=true: every request's messages are written to the logs; unset it unless you mean to keep users' prompts there");
  }
  if ((env.EDGE_CORS_ORIGINS || '*').split(',').some((origin) => origin.trim() === '*')) {
    warnings.push("warning: EDGE_CORS_ORIGINS='*' (the default): any web page may call the API from a browser; set EDGE_CORS_ORIGINS to your sites' origins");
  }
  return warnings;
}

/** A boolean setting as the settings read it (kit/settings `bool`). */
const isTrue = (value: string | undefined) => value === 'true' || value === '1' || value === 'yes';

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
