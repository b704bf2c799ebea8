import { runStandalone } from '../kit/index.js';
import { gatewayService } from './service.js';

await runStandalone(gatewayService);
