/**
 * kit/http: building HTTP services and calling others. The app factory, route tables and their
 * mount, bodies, pagination, the OpenAPI generator, listening and draining, the internal client,
 * the client of operator-configured endpoints, the egress guard for user-supplied URLs, the
 * reader of server-sent events and the assembly of a streamed completion's tool calls.
 */
export { createServiceApp, type ServiceAppOptions } from './app.js';
export type { ServedRequest } from './served.js';
export { adoptRequestObjects, ServiceRequest, ServiceResponse, serviceHttpObjects, usageReportHandOver, whenClosed, type ResponseObserver } from './request-objects.js';
export { createMetricsRegistry, oneReadPerScrape, stateGauge } from './metrics.js';
export { metricsPage, serveMetricsGroup } from './metrics-group.js';
export { CounterFamily, HistogramFamily, type CounterCell, type HistogramCell } from './series.js';
export { bodyTooLarge, readJsonBody, readRawBody, checkRequestStrings, parseSize } from './body.js';
export { mountRoutes, ROUTE_TABLE, type MountOptions } from './mount.js';
export * from './route-table.js';
export { conversationRefSchema, maxCharacters, requestMetadataSchema } from './openai-fields.js';
export { apiMarkdown, openApiDocument, openApiPath, unbuiltDeps, type DocumentedService, type OpenApiInfo } from './openapi.js';
export * from '../pagination.js';
export * from '../lifecycle.js';
export * from '../internal-client.js';
export * from './trusted-endpoint.js';
export * from '../egress.js';
export * from '../sse.js';
export * from '../tool-call-deltas.js';
