import type { ErrorRequestHandler, RequestHandler } from 'express';
import { ApiError, errorBody, isDependencyUnavailable } from '../errors.js';
import type { Logger } from '../logger.js';
import { assertStorableRequestStrings } from '../validation.js';
import './context.js';

/** Unknown route → 404 in shape A. */
export const unknownRoute: RequestHandler = (req, _res, next) => {
  next(new ApiError(404, `Unknown route: ${req.method} ${req.path}`));
};

/**
 * The last middleware. ApiErrors go out as they are; anything else is logged with its stack and
 * answered as a 500 without detail, so no handler can leak internals.
 */
export function errorHandler(logger: Logger): ErrorRequestHandler {
  return (caught, req, res, _next) => {
    const requestId = req.requestId;
    const error = caught instanceof URIError ? pathError(req) : caught;
    let status: number;
    let body;
    if (error instanceof ApiError) {
      status = error.status;
      body = error.toBody(requestId);
      // A stream already started has sent its head: its headers can no longer be set (below, it is cut).
      if (!res.headersSent) for (const [name, value] of Object.entries(error.headers)) res.setHeader(name, value);
      if (status >= 500) logger.error({ err: error, request_id: requestId, cause: (error.cause as Error | undefined)?.message }, error.message);
    } else if (isClientError(error)) {
      // Errors from body parsers or other middleware that carry a 4xx status.
      status = error.status;
      body = errorBody(status, status === 413 ? 'Request body is too large' : 'Bad request', { requestId });
    } else if (isDependencyUnavailable(error)) {
      // The database (or another dependency) is unreachable: a retryable 503, not a server bug.
      status = 503;
      body = errorBody(503, 'A service the platform depends on is temporarily unavailable; retry later', { requestId });
      logger.warn({ err: (error as Error).message, request_id: requestId }, 'dependency unavailable');
    } else {
      status = 500;
      body = errorBody(500, 'The server had an error while processing your request', { requestId });
      logger.error({ err: error, request_id: requestId }, 'unhandled error');
    }
    if (res.headersSent) {
      // A stream already started: it cannot change status; end it so the client is not left hanging.
      res.destroy();
      return;
    }
    res.status(status).json(body);
  };
}

/**
 * The router could not decode a path parameter (malformed percent-encoding, or bytes that are no
 * UTF-8): the same 400 naming `path` the kit's request-string check gives before any handler.
 */
function pathError(req: { path: string; query: unknown }): ApiError {
  try {
    assertStorableRequestStrings(req.path, req.query);
  } catch (error) {
    if (error instanceof ApiError) return error;
  }
  return new ApiError(400, 'The request path is not valid percent-encoded UTF-8', { param: 'path' });
}

function isClientError(error: unknown): error is { status: number } {
  const status = (error as { status?: unknown })?.status;
  return typeof status === 'number' && status >= 400 && status < 500;
}
