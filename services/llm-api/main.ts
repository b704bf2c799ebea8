import { runStandalone } from '../kit/index.js';
import { llmApiService } from './service.js';

await runStandalone(llmApiService);
