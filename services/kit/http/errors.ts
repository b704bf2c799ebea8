import type { ErrorRequestHandler, RequestHandler } from 'express';
import { ApiError, errorBody } from '../errors.js';
import type { Logger } from '../logger.js';
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
  return (error, req, res, _next) => {
    const requestId = req.requestId;
    let status: number;
    let body;
    if (error instanceof ApiError) {
      status = error.status;
      body = error.toBody(requestId);
      for (const [name, value] of Object.entries(error.headers)) res.setHeader(name, value);
      if (status >= 500) logger.error({ err: error, request_id: requestId, cause: (error.cause as Error | undefined)?.message }, error.message);
    } else if (isClientError(error)) {
      // Errors from body parsers or other middleware that carry a 4xx status.
      status = error.status;
      body = errorBody(status, status === 413 ? 'Request body is too large' : 'Bad request', { requestId });
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

function isClientError(error: unknown): error is { status: number } {
  const status = (error as { status?: unknown })?.status;
  return typeof status === 'number' && status >= 400 && status < 500;
}
