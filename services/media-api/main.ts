import { runStandalone } from '../kit/index.js';
import { mediaApiService } from './service.js';

await runStandalone(mediaApiService);
