import type { RequestHandler } from 'express';
import { acceptRequestId } from '../ids.js';
import { accessLogger, type Logger } from '../logger.js';
import { whenClosed } from './request-objects.js';
import './context.js';

export const REQUEST_ID_HEADER = 'x-request-id';

/**
 * Takes X-Request-ID from the request (when it is a sane token) or makes one, echoes it on the
 * response, and logs every request exactly once when it ends: method, path, status, duration, id.
 */
export function requestContext(serviceLogger: Logger): RequestHandler {
  const logger = accessLogger(serviceLogger);
  return (req, res, next) => {
    const incoming = req.headers[REQUEST_ID_HEADER];
    const requestId = acceptRequestId(typeof incoming === 'string' ? incoming : undefined);
    req.requestId = requestId;
    res.setHeader('X-Request-ID', requestId);
    const started = process.hrtime.bigint();
    const log = () => {
      const durationMs = Number(process.hrtime.bigint() - started) / 1e6;
      const entry = {
        request_id: requestId,
        method: req.method,
        path: req.originalUrl.split('?')[0],
        status: res.statusCode,
        duration_ms: Math.round(durationMs * 100) / 100,
        aborted: !res.writableFinished,
      };
      if (res.statusCode >= 500) logger.error(entry, 'request');
      else logger.info(entry, 'request');
    };
    whenClosed(res, log);
    next();
  };
}
