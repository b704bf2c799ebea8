import type { Response } from 'express';
import { ClientClosed, routeGroup, whenClosed, type Cancellation, type Route } from '../../kit/index.js';
import { cancelResponse, createResponse, deleteResponse, getResponse, listInputItems, type ResponsesDeps } from './responses.js';
import type { StreamEvent } from './recorder.js';
import { createResponseSchema, inputItemsQuery, responseIdParams, retrieveQuery } from './schemas.js';

const responses = routeGroup({ access: 'user' });

/** The Responses resource: `/v1/responses` (the edge forwards it; every route acts for the caller). */
export function responsesRoutes(deps: () => ResponsesDeps & { cancelWaitMs: number }): Route[] {
  return [
    responses.post('/v1/responses', {
      summary: 'Create a response: the model runs platform tools over up to 8 steps (JSON, an event stream with stream: true, or queued with background: true)',
      request: { body: createResponseSchema },
      response: { description: 'The Responses object, or `text/event-stream` of Responses events' },
      async handler({ principal, body, signal, cancellation, res }) {
        if (!body.stream) {
          whenAnswered(res, cancellation);
          return createResponse(deps(), principal, body, { signal });
        }
        let opened = false;
        const write = (event: StreamEvent) => {
          if (!opened) openStream(res);
          opened = true;
          if (!res.writableEnded && !res.destroyed) res.write(`event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`);
        };
        await createResponse(deps(), principal, body, { signal, onEvent: write });
        // A background stream answered `queued` without events: nothing else will be written here.
        if (!opened) openStream(res);
        res.end();
        return undefined;
      },
    }),
    responses.get('/v1/responses/:id', {
      summary: 'A stored response of the caller (404 for anyone else); JSON only (stream=true is a 400)',
      request: { params: responseIdParams, query: retrieveQuery },
      handler: ({ principal, params }) => getResponse(deps(), principal, params.id),
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
      summary: 'Cancel a running response (background or streaming); it ends as cancelled with its partial output',
      request: { params: responseIdParams },
      handler: ({ principal, params }) => cancelResponse(deps(), principal, params.id, deps().cancelWaitMs),
    }),
  ];
}

/**
 * A JSON caller is gone when its connection closes (the kit aborts the route's signal) and also
 * when its answer ends before the response does: the embedded edge, which hands a request to an
 * in-process service on the client's own response object, answers its 504 there once nothing was
 * written for `EDGE_UPSTREAM_READ_TIMEOUT_MS`, and that answer completes normally, which the kit
 * does not count as the client leaving. Either way the loop stops at its next step boundary. (Over
 * HTTP, the edge closes its connection to the service instead.) Once the response's own answer is
 * out, the abort changes nothing.
 */
function whenAnswered(res: Response, cancellation: Cancellation): void {
  whenClosed(res, () => cancellation.abort(new ClientClosed()));
}

function openStream(res: Response): void {
  res.status(200);
  res.setHeader('content-type', 'text/event-stream; charset=utf-8');
  res.setHeader('cache-control', 'no-cache');
  res.setHeader('x-accel-buffering', 'no');
  res.flushHeaders();
}
