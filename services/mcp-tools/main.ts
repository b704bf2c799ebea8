import { runStandalone } from '../kit/index.js';
import { mcpToolsService } from './service.js';

await runStandalone(mcpToolsService);
