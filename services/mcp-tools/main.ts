import { runStandalone } from '../kit/index.js';
import { standaloneChecks } from '../platform/standalone.js';
import { mcpToolsService } from './service.js';

await runStandalone(mcpToolsService, standaloneChecks);
