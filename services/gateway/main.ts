import { runStandalone } from '../kit/index.js';
import { standaloneChecks } from '../platform/standalone.js';
import { gatewayService } from './service.js';

await runStandalone(gatewayService, standaloneChecks);
