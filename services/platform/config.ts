import { baseConfigShape, checkOwnConfig, loadBaseConfig, loadConfig, type BaseConfig, type ConfigShape } from '../kit/index.js';
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
