import { exitOnConfigError, type BaseConfig } from '../kit/index.js';
import { loadPlatformConfig } from './config.js';
import { startPlatform, stopOnSignals, type Platform } from './platform.js';
import { startupFailureLine } from './startup-errors.js';
import { productionRefusals, startupFallbacks, startupSummary } from './production-safety.js';

let config: BaseConfig;
try {
  config = loadPlatformConfig();
} catch (error) {
  exitOnConfigError(error);
}
// Production refuses the conveniences of a laptop start unless each is allowed; one line each.
const refusals = productionRefusals(config);
if (refusals.length > 0) {
  for (const line of refusals) process.stderr.write(`${line}\n`);
  process.exit(1);
}
const fallbacks = startupFallbacks(config);
// A signal that arrives while the platform is starting (services already answer /healthz while
// the workers start) must still end in a clean stop, not in Node's default kill.
let signalledDuringStart: NodeJS.Signals | null = null;
const rememberSignal = (signal: NodeJS.Signals) => {
  signalledDuringStart ??= signal;
};
process.on('SIGTERM', rememberSignal);
process.on('SIGINT', rememberSignal);
let platform: Platform;
try {
  platform = await startPlatform(config);
} catch (error) {
  const line = startupFailureLine(error, config);
  if (!line) throw error;
  process.stderr.write(`${line}\n`);
  process.exit(1);
}
process.off('SIGTERM', rememberSignal);
process.off('SIGINT', rememberSignal);
stopOnSignals(platform);
if (signalledDuringStart) process.kill(process.pid, signalledDuringStart);
process.stdout.write(`${startupSummary(config, `http://127.0.0.1:${platform.port('gateway')}`, fallbacks).join('\n')}\n`);
platform.ctx.runtime.logger.info(
  { services: platform.started.map((s) => `${s.name}:${s.server.port}`) },
  'platform started',
);
