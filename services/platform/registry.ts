import type { ServiceDefinition, WorkerDefinition } from '../kit/index.js';
import { llmApiService } from '../llm-api/service.js';
import { mcpToolsService } from '../mcp-tools/service.js';
import { mediaApiService } from '../media-api/service.js';
import { responseApiService } from '../response-api/service.js';
import { gatewayService } from '../gateway/service.js';
import { webhookDeliveryWorker } from '../../workers/webhook-delivery/index.js';
import { providerSyncWorker } from '../../workers/provider-sync/index.js';
import { mediaDedupWorker } from '../../workers/media-dedup/index.js';

/** Everything `npm start` runs in one process. The edge is started last, once its upstreams listen. */
export const services: ServiceDefinition[] = [llmApiService, responseApiService, mediaApiService, mcpToolsService];
export const edge: ServiceDefinition[] = [gatewayService];
export const workers: WorkerDefinition[] = [webhookDeliveryWorker, providerSyncWorker, mediaDedupWorker];
