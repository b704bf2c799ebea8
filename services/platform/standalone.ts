import { checkOwnConfig, exitOnConfigError, loadBaseConfig, type BaseConfig, type StandaloneChecks } from '../kit/index.js';
import { standaloneRefusals } from './production-safety.js';
import { startupFailureLine } from './startup-errors.js';

/**
 * A service or worker started alone (node dist/services/<name>/main.js, as deploy/compose runs
 * production) stops as `npm start` does: production refusals for its own settings, one line each,
 * and one line naming the setting for a start failure the operator can fix.
 */
export const standaloneChecks: Required<StandaloneChecks> = {
  refusals: standaloneRefusals,
  failureLine: startupFailureLine,
};

/** Prints the lines and exits with 1 when there are any. */
function exitWith(lines: string[]): void {
  if (lines.length === 0) return;
  for (const line of lines) process.stderr.write(`${line}\n`);
  process.exit(1);
}

/**
 * Runs a worker alone: reads and checks its settings (including its own shape), refuses an unsafe
 * production start, then `start`s it; a failure with a one-line explanation exits with that line.
 */
export async function runWorkerAlone(worker: { config?: Parameters<typeof checkOwnConfig>[0][number]['config'] }, start: (config: BaseConfig) => Promise<void>): Promise<void> {
  let config: BaseConfig;
  try {
    config = loadBaseConfig();
    checkOwnConfig([worker], config.env);
  } catch (error) {
    exitOnConfigError(error);
  }
  exitWith(standaloneRefusals(config, { database: true, rateLimits: false }));
  try {
    await start(config);
  } catch (error) {
    const line = startupFailureLine(error, config);
    if (!line) throw error;
    exitWith([line]);
  }
}
