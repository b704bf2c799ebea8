import { exitOnConfigError, loadBaseConfig, type BaseConfig } from '../kit/index.js';
import { startPlatform, stopOnSignals } from './platform.js';

let config: BaseConfig;
try {
  config = loadBaseConfig();
} catch (error) {
  exitOnConfigError(error);
}
const platform = await startPlatform(config);
stopOnSignals(platform);
platform.ctx.runtime.logger.info(
  { services: platform.started.map((s) => `${s.name}:${s.server.port}`) },
  'platform started',
);
