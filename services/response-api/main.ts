import { runStandalone } from '../kit/index.js';
import { responseApiService } from './service.js';

await runStandalone(responseApiService);
