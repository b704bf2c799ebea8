import { runStandalone } from '../kit/index.js';
import { standaloneChecks } from '../platform/standalone.js';
import { llmApiService } from './service.js';

await runStandalone(llmApiService, standaloneChecks);
