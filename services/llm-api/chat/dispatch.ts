import { ApiError } from '../../kit/index.js';
import type { Candidate, ResolvedModel } from '../models/registry.js';
import type { EndpointConfig } from '../models/types.js';
import type { LlmCore } from '../routing/core.js';
import { orderEndpoints } from '../routing/select.js';
import { authHeaders, isTimeout, joinUrl, type UpstreamResponse } from '../routing/upstream.js';

/**
 * Sends a completion to the best endpoint and fails over — to the next endpoint of the provider,
 * then to the next provider offering the model — on connect errors, timeouts, 5xx and 429, and on
 * provider-side 401/403/404 (a misconfigured provider), all before any byte reaches the client.
 * Any other 4xx is the request's fault and goes back to the client at once.
 */
export interface Attempt {
  candidate: Candidate;
  endpoint: EndpointConfig;
}

export interface Dispatched {
  res: UpstreamResponse;
  attempt: Attempt;
  tries: number;
}

export function planAttempts(core: LlmCore, model: ResolvedModel): Attempt[] {
  const healthy: Attempt[] = [];
  const unhealthy: Attempt[] = [];
  for (const candidate of model.candidates) {
    const order = orderEndpoints(candidate.provider.endpoints, core.health, core.random);
    for (const endpoint of order.healthy) healthy.push({ candidate, endpoint });
    for (const endpoint of order.unhealthy) unhealthy.push({ candidate, endpoint });
  }
  // Endpoints in a cool-down are a last resort, tried only when every healthy one failed.
  return [...healthy, ...unhealthy];
}

interface Failure {
  status: number;
  message: string;
  retryAfter?: string;
}

export class ClientClosed extends Error {}

async function readError(res: UpstreamResponse): Promise<{ message: string; param: string | null; code: string | null }> {
  const text = (await res.body.text().catch(() => '')).slice(0, 4096);
  try {
    const parsed = JSON.parse(text) as { error?: { message?: string; param?: string; code?: string } | string; message?: string };
    const err = typeof parsed.error === 'object' ? parsed.error : undefined;
    return {
      message: err?.message ?? (typeof parsed.error === 'string' ? parsed.error : parsed.message) ?? (text || `status ${res.statusCode}`),
      param: err?.param ?? null,
      code: err?.code ?? null,
    };
  } catch {
    return { message: text || `status ${res.statusCode}`, param: null, code: null };
  }
}

export async function dispatch(
  core: LlmCore,
  attempts: Attempt[],
  bodyFor: (candidate: Candidate) => string,
  options: { signal: AbortSignal; requestId: string },
): Promise<Dispatched> {
  if (attempts.length === 0) throw new ApiError(503, 'No endpoint is available for this model');
  let last: Failure = { status: 502, message: 'The model provider could not be reached' };
  let tries = 0;
  for (const attempt of attempts) {
    if (options.signal.aborted) throw new ClientClosed();
    tries++;
    const url = joinUrl(attempt.endpoint.url, 'chat/completions');
    let res: UpstreamResponse;
    try {
      res = await core.upstream.postJson(
        url,
        bodyFor(attempt.candidate),
        { ...authHeaders(attempt.candidate.provider.apiKey), 'x-request-id': options.requestId },
        options.signal,
      );
    } catch (error) {
      if (options.signal.aborted) throw new ClientClosed();
      core.health.failure(attempt.endpoint.url);
      last = isTimeout(error)
        ? { status: 504, message: 'The model provider did not answer in time' }
        : { status: 502, message: 'The model provider could not be reached' };
      continue;
    }
    const status = res.statusCode;
    if (status >= 200 && status < 300) {
      core.health.success(attempt.endpoint.url);
      return { res, attempt, tries };
    }
    const detail = await readError(res);
    if (status === 429) {
      const retryAfter = res.headers['retry-after'];
      last = { status: 429, message: detail.message || 'The model provider is rate limited', retryAfter: typeof retryAfter === 'string' ? retryAfter : undefined };
      continue;
    }
    if (status >= 500) {
      core.health.failure(attempt.endpoint.url);
      last = { status: 502, message: `The model provider failed: ${detail.message}` };
      continue;
    }
    if (status === 401 || status === 403 || status === 404) {
      last = { status: 502, message: `The model provider refused the request (${status}): ${detail.message}` };
      continue;
    }
    // The request itself is wrong for this model: the client should know, in shape A.
    throw new ApiError(status === 413 ? 413 : 400, detail.message, { param: detail.param, code: detail.code ?? undefined });
  }
  if (last.status === 429) {
    const seconds = Math.min(Math.max(Number(last.retryAfter) || 1, 0), 60);
    throw new ApiError(429, `All providers for this model are rate limited: ${last.message}`, { headers: { 'retry-after': String(seconds) } });
  }
  throw new ApiError(last.status, last.message);
}

/**
 * Streams: the client's 200 is held back until the provider's first body chunk has arrived, so a
 * provider that accepts the request and then dies (or answers with something other than an event
 * stream) is failed over like any other, still before the first byte reaches the client.
 */
export async function dispatchStream(
  core: LlmCore,
  attempts: Attempt[],
  bodyFor: (candidate: Candidate) => string,
  options: { signal: AbortSignal; requestId: string },
): Promise<{ dispatched: Dispatched; firstChunk: Buffer; rest: AsyncIterator<unknown> }> {
  let offset = 0;
  let tries = 0;
  for (;;) {
    const dispatched = await dispatch(core, attempts.slice(offset), bodyFor, options);
    tries += dispatched.tries;
    offset = attempts.indexOf(dispatched.attempt) + 1;
    const url = dispatched.attempt.endpoint.url;
    const contentType = String(dispatched.res.headers['content-type'] ?? '');
    let failure = 'The model provider did not answer with an event stream';
    if (contentType.includes('text/event-stream')) {
      try {
        const rest = dispatched.res.body[Symbol.asyncIterator]();
        const first = await rest.next();
        if (!first.done) return { dispatched: { ...dispatched, tries }, firstChunk: first.value as Buffer, rest };
        failure = 'The model provider ended the stream before sending anything';
      } catch {
        if (options.signal.aborted) throw new ClientClosed();
        failure = 'The model provider failed before the stream started';
      }
    } else {
      await dispatched.res.body.dump().catch(() => {});
    }
    core.health.failure(url);
    if (offset >= attempts.length) throw new ApiError(502, failure);
  }
}
