import type { LlmApiResource } from '../resource.js';
import { requestLogTable } from './migrations.js';
import { requestLogRoutes } from './routes.js';

export { requestLogConfigShape } from './config.js';
export { createRequestLogWriter, type RequestLogDeps } from './requests.js';

/** The recent-requests log (`GET /v1/admin/requests`); rows come from the app's onRequestEnd hook. */
export const requestsResource: LlmApiResource = {
  name: 'requests',
  migrations: [requestLogTable],
  routes: (deps) => requestLogRoutes(deps),
};
