import { runStandalone } from '../kit/index.js';
import { standaloneChecks } from '../platform/standalone.js';
import { responseApiService } from './service.js';

await runStandalone(responseApiService, standaloneChecks);
