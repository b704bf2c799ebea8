import type { RequestHandler } from 'express';
import { whenClosed } from './request-objects.js';
import type { RequestOutcome } from '../request-outcome.js';
import type { UsageReport } from '../usage-report.js';

/**
 * What a service knows about a request once it has ended, for a service that keeps its own record
 * of them (llm-api's recent-requests log). A route handler adds `res.locals.usageReport` (chat) to
 * have model, provider and tokens in it.
 */
export interface ServedRequest extends RequestOutcome {
  auth_method: string | null;
  api_key_id: string | null;
  usage: UsageReport | null;
  ended_at: Date;
}

/** Calls `onEnd` once per request when its answer ends or the client leaves (probes excluded by the caller). */
export function servedRequests(onEnd: (served: ServedRequest) => void, now: () => number, skip: (path: string) => boolean): RequestHandler {
  return (req, res, next) => {
    if (skip(req.path)) return next();
    const started = process.hrtime.bigint();
    whenClosed(res, () => {
      const principal = req.principal;
      const template = res.locals.routeTemplate;
      onEnd({
        request_id: req.requestId,
        method: req.method,
        path: req.originalUrl.split('?')[0]!.slice(0, 2048),
        route: typeof template === 'string' ? template : null,
        status: res.statusCode,
        duration_ms: Math.round(Number(process.hrtime.bigint() - started) / 1e4) / 100,
        aborted: !res.writableFinished,
        auth_method: principal?.authMethod ?? null,
        user_id: principal?.userId ?? null,
        api_key_id: principal?.apiKeyId ?? null,
        usage: (res.locals.usageReport as UsageReport | undefined) ?? null,
        ended_at: new Date(now()),
      });
    });
    next();
  };
}
