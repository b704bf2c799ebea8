import { baseConfigShape, checkOwnConfig, loadBaseConfig, loadConfig, type BaseConfig, type ConfigShape } from '../kit/index.js';
import { deckOverrides, loadEdgeConfig } from '../gateway/service.js';
import { loadIdentityConfig } from '../llm-api/service.js';
import { processesShape } from './processes.js';
import { productionSafetyShape } from './production-safety.js';
import { edge, services, workers } from './registry.js';

/** The settings `npm start` itself reads (beyond every service's): production refusals, processes. */
const platformStartShape = { ...productionSafetyShape, ...processesShape };

/**
 * Every setting the platform reads, by owner: the platform-wide shape of the kit, then each
 * service's and worker's own shape (declared next to its code, in its definition's `config`).
 * `npm start` validates them all once, before anything opens, so a bad variable stops the process
 * with one line whichever part reads it; README.md documents each (test/docs.test.ts checks it).
 */
export function configShapes(): Array<{ owner: string; shape: ConfigShape }> {
  const owned = [...services, ...edge, ...workers].flatMap((def) => (def.config ? [{ owner: def.name, shape: def.config }] : []));
  return [{ owner: 'platform', shape: baseConfigShape }, { owner: 'platform start', shape: platformStartShape }, ...owned];
}

/** The platform settings from `env`, after checking every owner's settings in the same environment. */
export function loadPlatformConfig(env: NodeJS.ProcessEnv = process.env): BaseConfig {
  const config = loadBaseConfig(env);
  checkOwnConfig([...services, ...edge, ...workers], config.env);
  loadConfig(platformStartShape, config.env as NodeJS.ProcessEnv);
  return config;
}

/**
 * The edge and the token issuer each accept their own lifetime settings, but only together do they
 * work: the edge refuses a token whose `exp − iat` is above its maximum (plugins/jwt-auth refuses
 * only when strictly above, so equal passes), and the embedded issuer signs `exp = iat + TTL`. A TTL
 * above the edge's maximum would have every token the platform issues refused, which only shows as
 * 401s after sign-in; `npm start` knows both, so it refuses at once. The edge's maximum is
 * `DECK_JWT_MAX_LIFETIME_SECONDS` when set (it wins, as every `DECK_*` variable does). With the
 * Keycloak driver the tokens are Keycloak's and these TTLs issue none.
 */
export function tokenLifetimeRefusals(config: BaseConfig): string[] {
  const identity = loadIdentityConfig(config.env);
  if (identity.KEYCLOAK_URL) return [];
  const deck = deckOverrides(config.env).DECK_JWT_MAX_LIFETIME_SECONDS;
  const setting = deck ? 'DECK_JWT_MAX_LIFETIME_SECONDS' : 'EDGE_JWT_MAX_LIFETIME_SECONDS';
  // A DECK_ value that is no whole number is the deck's to refuse, not this check's.
  if (deck && !/^\d+$/.test(deck)) return [];
  const max = deck ? Number(deck) : loadEdgeConfig(config.env).EDGE_JWT_MAX_LIFETIME_SECONDS;
  const over = (
    [
      ['ACCESS_TOKEN_TTL_SECONDS', identity.ACCESS_TOKEN_TTL_SECONDS],
      ['GUEST_ACCESS_TOKEN_TTL_SECONDS', identity.GUEST_ACCESS_TOKEN_TTL_SECONDS],
    ] as const
  ).filter(([, ttl]) => ttl > max);
  if (over.length === 0) return [];
  const names = over.map(([name]) => name).join(' and ');
  return [
    `refusing to start: ${over.map(([name, ttl]) => `${name}=${ttl}`).join(' and ')} ${over.length > 1 ? 'are' : 'is'} above ${setting}=${max}, so the edge would refuse every such token the platform issues; lower ${names} to at most ${max} or raise ${setting}`,
  ];
}
