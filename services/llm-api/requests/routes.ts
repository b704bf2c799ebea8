import { z } from 'zod';
import { listOf, pageOf, pageQuery, route, type Route } from '../../kit/index.js';
import { listRecentRequests, requestLogEntrySchema, type RequestLogDeps } from './requests.js';

const id = z.string().min(1).max(128);
const requestsQuery = pageQuery().extend({
  request_id: id.optional().describe('the X-Request-ID of one request'),
  user_id: id.optional(),
  key_id: id.optional().describe('an API key id (key_…)'),
});

/** GET /v1/admin/requests: find recent requests by id, user or key. */
export function requestLogRoutes(deps: { requestLog: RequestLogDeps }): Route[] {
  return [
    route({
      method: 'get',
      path: '/v1/admin/requests',
      summary: 'Recent requests served by the LLM API, newest first (filter by request id, user or key; paginated)',
      access: 'admin',
      tag: 'requests',
      request: { query: requestsQuery },
      response: { schema: listOf(requestLogEntrySchema) },
      handler: ({ query }) => listRecentRequests(deps.requestLog, { requestId: query.request_id, userId: query.user_id, keyId: query.key_id }, pageOf(query)),
    }),
  ];
}
