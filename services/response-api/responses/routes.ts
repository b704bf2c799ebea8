import { ApiError, projectNamedIn, routeGroup, type Route } from '../../kit/index.js';
import { EventStreamWriter } from './event-stream.js';
import { cancelResponse, createResponse, deleteResponse, getResponse, listInputItems, responseEvents, type ResponsesDeps } from './responses.js';
import { createResponseSchema, inputItemsQuery, responseIdParams, retrieveQuery } from './schemas.js';

const responses = routeGroup({ access: 'user' });

/**
 * Routes of OpenAI's Responses API this service does not serve: a clear 404 naming the path
 * (`client.responses.inputTokens.count()` and `.compact()` raise `NotFoundError`).
 */
const UNSUPPORTED = [
  { path: '/v1/responses/input_tokens', why: "counting a request's input tokens needs a token count from llm-api, which it does not offer" },
  { path: '/v1/responses/compact', why: 'compacting a conversation is not implemented' },
];

/**
 * The Responses resource: `/v1/responses` (the edge forwards it; every route acts for the caller).
 * A caller that leaves aborts `signal`, also when the edge answered its 504 first (the kit's route
 * cancellation), and the loop stops at its next step boundary. A stream is written by `EventStreamWriter`.
 */
export function responsesRoutes(deps: () => ResponsesDeps & { cancelWaitMs: number; keepAliveMs: number }): Route[] {
  return [
    responses.post('/v1/responses', {
      summary: 'Create a response: the model runs platform tools over up to 8 steps (JSON, an event stream with stream: true, or queued with background: true)',
      request: { body: createResponseSchema },
      response: { description: 'The Responses object, or `text/event-stream` of Responses events' },
      async handler({ principal, body, signal, req, res }) {
        const projectId = projectNamedIn(req.headers);
        if (!body.stream) return createResponse(deps(), principal, body, { signal, projectId });
        const stream = new EventStreamWriter(res, deps().keepAliveMs);
        try {
          await createResponse(deps(), principal, body, { signal, projectId, onEvent: stream.write, drained: stream.drained });
        } finally {
          stream.stop();
        }
        // A background stream answered `queued` without events: the stream opens and ends empty.
        stream.end();
        return undefined;
      },
    }),
    // Before `/v1/responses/:id`, which would otherwise answer these paths 405 (it takes GET and DELETE only).
    ...UNSUPPORTED.map(({ path, why }) =>
      responses.post(path, {
        summary: `Not supported: answers 404 (${why})`,
        response: { description: 'Always a 404 error naming the path as unsupported' },
        handler() {
          throw new ApiError(404, `POST ${path} is not supported by this server: ${why}`, { code: 'unsupported_endpoint' });
        },
      }),
    ),
    responses.get('/v1/responses/:id', {
      summary: 'A stored response of the caller (404 for anyone else); with stream=true a background response\'s events after starting_after, then live until it ends',
      request: { params: responseIdParams, query: retrieveQuery },
      response: { description: 'The Responses object, or `text/event-stream` of the kept Responses events' },
      async handler({ principal, params, query, signal, res }) {
        if (query.stream !== 'true') return getResponse(deps(), principal, params.id);
        const events = responseEvents(deps(), principal, params.id, query.starting_after ?? null, signal);
        // The checks run before the stream opens: a refusal (404, 400) is still a JSON answer.
        let page = await events.next();
        const stream = new EventStreamWriter(res, deps().keepAliveMs);
        if (!page.done) stream.start();
        try {
          for (; !page.done; page = await events.next()) {
            for (const event of page.value) stream.writeEncoded(event.type, event.data);
            await stream.drained();
          }
        } finally {
          stream.stop();
          await events.return(undefined);
        }
        stream.end();
        return undefined;
      },
    }),
    responses.get('/v1/responses/:id/input_items', {
      summary: 'The input items of a response, paginated (limit, order, after, before)',
      request: { params: responseIdParams, query: inputItemsQuery },
      handler: ({ principal, params, query }) => listInputItems(deps(), principal, params.id, query),
    }),
    responses.delete('/v1/responses/:id', {
      summary: 'Delete a response (a running one is cancelled first)',
      request: { params: responseIdParams },
      handler: ({ principal, params }) => deleteResponse(deps(), principal, params.id),
    }),
    responses.post('/v1/responses/:id/cancel', {
      summary: 'Cancel a running response (background or streaming); it ends as cancelled with its partial output. An ended background response is answered unchanged; an ended foreground one is a 400',
      request: { params: responseIdParams },
      handler: ({ principal, params }) => cancelResponse(deps(), principal, params.id, deps().cancelWaitMs),
    }),
  ];
}
