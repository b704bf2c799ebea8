import { fileURLToPath } from 'node:url';
import { createLogger, exitOnConfigError, type BaseConfig } from '../kit/index.js';
import { loadPlatformConfig, tokenLifetimeRefusals } from './config.js';
import { startPlatform, stopOnSignals, type Platform } from './platform.js';
import { isSupervisedCopy, platformProcesses, processesRefusals, reportToSupervisor, superviseProcesses } from './processes.js';
import { startupFailureLine } from './startup-errors.js';
import { productionRefusals, startupFallbacks, startupSummary } from './production-safety.js';

let config: BaseConfig;
let processes: number;
try {
  config = loadPlatformConfig();
  processes = platformProcesses(config);
} catch (error) {
  exitOnConfigError(error);
}
// Production refuses the conveniences of a laptop start unless each is allowed; any start refuses
// settings that contradict each other. One line each.
const refusals = [...productionRefusals(config), ...processesRefusals(config, processes), ...tokenLifetimeRefusals(config)];
if (refusals.length > 0) {
  for (const line of refusals) process.stderr.write(`${line}\n`);
  process.exit(1);
}
const fallbacks = startupFallbacks(config);
const printSummary = (url: string, extra: string[] = []) => process.stdout.write(`${[...startupSummary(config, url, fallbacks), ...extra].join('\n')}\n`);

if (processes > 1 && !isSupervisedCopy()) {
  // The supervisor: the copies serve, it starts, replaces and stops them (processes.ts).
  await superviseProcesses({
    count: processes,
    config,
    logger: createLogger({ level: config.LOG_LEVEL, name: 'platform' }),
    entry: fileURLToPath(import.meta.url),
    onReady: (pids) => printSummary(`http://127.0.0.1:${config.GATEWAY_PORT}`, [`processes: ${pids.length} (pids ${pids.join(', ')})`]),
  });
} else {
  // A signal that arrives while the platform is starting (services already answer /healthz while
  // the workers start) still ends in a clean stop when the start finishes within SHUTDOWN_TIMEOUT_MS;
  // a start that does not (a server that never answers) must not keep the process: it exits 1 then,
  // and at once on a second signal.
  let signalledDuringStart: NodeJS.Signals | null = null;
  let startBound: NodeJS.Timeout | undefined;
  const rememberSignal = (signal: NodeJS.Signals) => {
    if (signalledDuringStart) {
      process.stderr.write(`stopped by a second ${signal} while starting\n`);
      process.exit(1);
    }
    signalledDuringStart = signal;
    startBound = setTimeout(() => {
      process.stderr.write(`stopped by ${signal} while starting: the start did not finish within SHUTDOWN_TIMEOUT_MS (${config.SHUTDOWN_TIMEOUT_MS} ms)\n`);
      process.exit(1);
    }, config.SHUTDOWN_TIMEOUT_MS);
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
  clearTimeout(startBound);
  process.off('SIGTERM', rememberSignal);
  process.off('SIGINT', rememberSignal);
  const stop = stopOnSignals(platform);
  if (signalledDuringStart) process.kill(process.pid, signalledDuringStart);
  // A copy under a supervisor reports to it; the supervisor prints the summary once for all.
  if (isSupervisedCopy()) reportToSupervisor(stop);
  else printSummary(`http://127.0.0.1:${platform.port('gateway')}`);
  platform.ctx.runtime.logger.info(
    { services: platform.started.map((s) => `${s.name}:${s.server.port}`) },
    'platform started',
  );
}
