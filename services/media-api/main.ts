import { runStandalone } from '../kit/index.js';
import { standaloneChecks } from '../platform/standalone.js';
import { mediaApiService } from './service.js';

await runStandalone(mediaApiService, standaloneChecks);
