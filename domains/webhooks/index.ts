/**
 * The webhooks domain, shared by llm-api (admin API) and workers/webhook-delivery: tables and
 * their migrations, the subscription and delivery stores, event types and subscription patterns,
 * queue names and the delivery job. Importers use this file only, never the files behind it.
 */
export { webhooksConfigShape, type WebhooksConfig } from './config.js';
export { webhooksMigrationSet } from './migrations.js';
export { HeaderValueUnopenable, isSealedHeaderValue, openHeaders, redactedHeaders, REDACTED_HEADER_VALUE, sealHeaders, sealPlainHeaders } from './header-values.js';
export { registerWebhookMetrics } from './metrics.js';
export { createWebhooksStore, type WebhookInsert, type WebhookPatch, type WebhookRow, type WebhooksStore } from './store.js';
export {
  createDeliveriesStore,
  excerptText,
  RESPONSE_EXCERPT_BYTES,
  type AttemptOutcome,
  type AttemptRecord,
  type AttemptRow,
  type DeliveriesStore,
  type DeliveryRow,
  type DeliveryStatus,
  type NewDelivery,
} from './deliveries-store.js';
export {
  ATTEMPT_HEADER,
  DELIVERY_QUEUE,
  EVENT_FAMILIES,
  EVENT_TYPES,
  FANOUT_QUEUE,
  PARKED_FOR_HEADER,
  PARKED_HEADER,
  RESERVED_HEADERS,
  TEST_EVENT_TYPE,
  isValidPattern,
  matchesAny,
  patternMatches,
} from './events.js';
export { declareWebhookQueues, FANOUT_BINDINGS, sendDeliveryJob, type DeliveryJob } from './jobs.js';
