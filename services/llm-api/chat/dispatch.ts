import { ApiError, type CancelSignal, type Logger } from '../../kit/index.js';
import type { IncomingHttpHeaders } from 'node:http';
import type { ResolvedModel } from '../models/registry.js';
import { failover, planAttempts, type Attempt, type AttemptFailure, type Dispatched, type HealthTracker, type SendResult } from '../routing/failover.js';
import type { Random } from '../routing/select.js';
import { isTimeout, joinUrl, type ProviderCall, type UpstreamResponse } from '../routing/upstream.js';
import type { BodyChunks } from '../routing/provider-answer.js';
import { firstReadData } from './stream.js';
import { clientErrorFor, redactSecrets } from './upstream-errors.js';

/**
 * The HTTP half of failover: `send(attempt)` posts the completion to one endpoint and says what
 * its answer means (routing/failover.ts decides what to do about it).
 * - Connect errors, timeouts and 5xx: try the next endpoint, and count against this one's health.
 * - 429 and the provider's own 401/403/404 (a misconfigured provider): try the next, health untouched.
 *   A 429 whose body says `insufficient_quota` (the account's quota is spent) is a provider failure
 *   (502), not a rate limit: it never becomes the client's 429.
 * - Any other 4xx: the request is at fault; back to the client at once (mapped, never verbatim).
 * - Streams: the client's 200 waits for the provider's first body chunk, so a provider that accepts
 *   the request and dies (or answers with something other than an event stream) is failed over too.
 * Every failure is logged with the provider, the endpoint, the upstream status and the upstream
 * body with secrets redacted.
 */
export interface OpenStream {
  firstChunk: Uint8Array;
  /** The rest of the body, after `firstChunk`. */
  rest: BodyChunks;
}

export interface DispatchRequest {
  /** The upstream body per provider model (`provider_original_model_id`), built before any attempt. */
  bodies: ReadonlyMap<string, string | Buffer>;
  requestId: string;
  /** Aborted with the reason to report: `ClientClosed`, or an ApiError (the deadline). */
  signal: CancelSignal;
}

export interface ChatDispatcher {
  plan(model: ResolvedModel): Attempt[];
  json(attempts: Attempt[], request: DispatchRequest): Promise<Dispatched<UpstreamResponse>>;
  stream(attempts: Attempt[], request: DispatchRequest): Promise<Dispatched<OpenStream>>;
  /** Logs a failure of the chosen attempt after the answer started (mid-stream), redacted. */
  logStreamFailure(attempt: Attempt, requestId: string, detail: string, kind: string): void;
}

export interface DispatcherDeps {
  upstream: { postJson(url: string, body: string | Buffer, call: ProviderCall, signal?: CancelSignal): Promise<UpstreamResponse> };
  health: HealthTracker;
  random: Random;
  logger: Pick<Logger, 'warn'>;
  /** How much of an upstream error body is read (the rest is cut). */
  errorBodyMaxBytes: number;
  /** Top-level request fields an upstream 400's `param` may name. */
  knownFields: ReadonlySet<string>;
}

/**
 * A 429's `Retry-After` in seconds: a number, or an HTTP date (RFC 9110 allows both), read against
 * the provider's own `Date` header so neither clock's skew counts; 1 when it says neither.
 */
function retryAfterSeconds(headers: IncomingHttpHeaders): number {
  const value = headers['retry-after'];
  if (typeof value !== 'string') return 1;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return seconds;
  const at = Date.parse(value);
  const now = Date.parse(headers.date ?? '');
  return Number.isFinite(at) && Number.isFinite(now) ? (at - now) / 1000 : 1;
}

/** A failed attempt's body that is not an event stream: dropped, and the connection kept if it is short. */
const DISCARD_UNEXPECTED_BODY = { maxMs: 2_000, maxBytes: 128 * 1024 };

interface LoggedFailure extends AttemptFailure {
  upstreamStatus?: number;
  detail: string;
}

export function createDispatcher(deps: DispatcherDeps): ChatDispatcher {
  const fail = (error: ApiError, flags: { retry: boolean; unhealthy: boolean }, detail: string, upstreamStatus?: number, retryAfterSeconds?: number): { ok: false; failure: LoggedFailure } => ({
    ok: false,
    failure: { error, ...flags, detail, upstreamStatus, retryAfterSeconds },
  });

  async function post(attempt: Attempt, request: DispatchRequest): Promise<SendResult<UpstreamResponse>> {
    // Fail closed: a stored key that does not decrypt is never replaced by no key at all. Another
    // provider of the model (with its own key) may still answer, so the attempt is only skipped.
    if (attempt.candidate.provider.keyUnavailable) return fail(keyUnavailable(), { retry: true, unhealthy: false }, KEY_UNAVAILABLE_DETAIL);
    const body = request.bodies.get(attempt.candidate.pm.provider_original_model_id)!;
    const url = joinUrl(attempt.endpoint.url, 'chat/completions');
    let res: UpstreamResponse;
    try {
      res = await deps.upstream.postJson(url, body, { apiKey: attempt.candidate.provider.apiKey, requestId: request.requestId }, request.signal);
    } catch (error) {
      if (request.signal.aborted) throw request.signal.reason;
      const message = (error as Error)?.message ?? String(error);
      return isTimeout(error)
        ? fail(new ApiError(504, 'The model provider did not answer in time'), { retry: true, unhealthy: true }, message)
        : fail(new ApiError(502, 'The model provider could not be reached'), { retry: true, unhealthy: true }, message);
    }
    const status = res.statusCode;
    if (status >= 200 && status < 300) return { ok: true, value: res };
    let text = '';
    try {
      text = (await res.readAll(deps.errorBodyMaxBytes)).bytes.toString('utf8');
    } catch {
      if (request.signal.aborted) throw request.signal.reason;
    }
    const secrets = [attempt.candidate.provider.apiKey];
    const detail = redactSecrets(text, secrets);
    if (status === 429) {
      // A spent quota is not a rate limit: it lasts until the account's billing period resets, so
      // it is a provider failure (tried elsewhere, never the "retry after" answer). The account's
      // state, not the endpoint's: health untouched.
      if (isQuotaExhausted(text)) return fail(quotaExhausted(), { retry: true, unhealthy: false }, detail, status);
      return fail(new ApiError(429, 'The model provider is rate limited'), { retry: true, unhealthy: false }, detail, status, retryAfterSeconds(res.headers));
    }
    if (status >= 500) return fail(new ApiError(502, `The model provider failed (upstream status ${status})`), { retry: true, unhealthy: true }, detail, status);
    if (status === 401 || status === 403 || status === 404) {
      return fail(new ApiError(502, `The model provider refused the request (upstream status ${status})`), { retry: true, unhealthy: false }, detail, status);
    }
    return fail(clientErrorFor(status, text, deps.knownFields), { retry: false, unhealthy: false }, detail, status);
  }

  async function openStream(attempt: Attempt, request: DispatchRequest): Promise<SendResult<OpenStream>> {
    const sent = await post(attempt, request);
    if (!sent.ok) return sent;
    const res = sent.value;
    const contentType = String(res.headers['content-type'] ?? '');
    if (!contentType.includes('text/event-stream')) {
      res.discardRest(DISCARD_UNEXPECTED_BODY);
      return fail(new ApiError(502, 'The model provider did not answer with an event stream'), { retry: true, unhealthy: true }, `content-type ${contentType.slice(0, 100)}`, res.statusCode);
    }
    try {
      let first = res.read();
      while (first === undefined) {
        await res.readable();
        first = res.read();
      }
      if (first !== null) {
        const refusal = leadingErrorEvent(first);
        if (refusal === null) return { ok: true, value: { firstChunk: first, rest: res } };
        // Nothing has gone to the client yet: an error as the provider's first event fails the
        // attempt like an error status would, so the client gets a status, not a 200 stream.
        res.discardRest(DISCARD_UNEXPECTED_BODY);
        return refusedStream(refusal, attempt, res.statusCode);
      }
      return fail(new ApiError(502, 'The model provider ended the stream before sending anything'), { retry: true, unhealthy: true }, 'empty stream', res.statusCode);
    } catch (error) {
      res.release();
      if (request.signal.aborted) throw request.signal.reason;
      return fail(new ApiError(502, 'The model provider failed before the stream started'), { retry: true, unhealthy: true }, (error as Error)?.message ?? '', res.statusCode);
    }
  }

  /**
   * A stream whose first event is an error: the request's fault when the provider says what an
   * HTTP 400 would (a known OpenAI code, or a context that is too long), else a provider failure
   * tried elsewhere (health untouched: the error may be this request's alone).
   */
  function refusedStream(payload: string, attempt: Attempt, upstreamStatus: number) {
    const detail = redactSecrets(payload, [attempt.candidate.provider.apiKey]);
    const client = clientErrorFor(400, payload, deps.knownFields);
    if (client.code !== 'upstream_invalid_request') return fail(client, { retry: false, unhealthy: false }, detail, upstreamStatus);
    return fail(new ApiError(502, 'The model provider reported an error before the stream started'), { retry: true, unhealthy: false }, detail, upstreamStatus);
  }

  /** One log line per upstream failure, naming the provider and the endpoint; the upstream text is redacted. */
  const logUpstream = (attempt: Attempt, requestId: string, what: string, fields: Record<string, unknown>) => {
    const provider = attempt.candidate.provider.row;
    const endpoint = endpointForLog(attempt.endpoint.url);
    deps.logger.warn(
      { request_id: requestId, provider_id: provider.id, provider: provider.name, endpoint, model: attempt.candidate.pm.provider_original_model_id, ...fields },
      `${what} at provider ${provider.name}, endpoint ${endpoint}`,
    );
  };
  const logFailure = (requestId: string) => (attempt: Attempt, failure: AttemptFailure) => {
    const { detail, upstreamStatus } = failure as LoggedFailure;
    logUpstream(attempt, requestId, 'upstream failure', { upstream_status: upstreamStatus ?? null, status: failure.error.status, retry: failure.retry, upstream_error: detail });
  };

  return {
    plan: (model) => planAttempts(model.candidates, deps.health, deps.random),
    json: (attempts, request) => failover(attempts, (attempt) => post(attempt, request), { health: deps.health, signal: request.signal, onFailure: logFailure(request.requestId) }),
    stream: (attempts, request) => failover(attempts, (attempt) => openStream(attempt, request), { health: deps.health, signal: request.signal, onFailure: logFailure(request.requestId) }),
    logStreamFailure(attempt, requestId, detail, kind) {
      logUpstream(attempt, requestId, 'upstream stream failure', { failure: kind, upstream_error: redactSecrets(detail, [attempt.candidate.provider.apiKey]) });
    },
  };
}

const QUOTA_WORD = 'insufficient_quota';

/**
 * An upstream 429 body that says the account's quota is spent (OpenAI: `error.type` or
 * `error.code` `insufficient_quota`). Read only on a 429, whose body was read for the log anyway;
 * parsed only when the word is in it.
 */
export function isQuotaExhausted(text: string): boolean {
  if (!text.includes(QUOTA_WORD)) return false;
  try {
    const error = (JSON.parse(text) as { error?: unknown } | null)?.error as { type?: unknown; code?: unknown } | null | undefined;
    return typeof error === 'object' && error !== null && (error.type === QUOTA_WORD || error.code === QUOTA_WORD);
  } catch {
    return false;
  }
}

const quotaExhausted = () => new ApiError(502, "The model provider's quota is exhausted (upstream status 429)");

const KEY_UNAVAILABLE_DETAIL = 'the stored API key of this provider does not decrypt with this MASTER_KEY; the provider was not called (set its api_key again)';
const keyUnavailable = () =>
  new ApiError(502, 'The model provider cannot be called: its stored API key is unusable. An administrator must set it again', { code: 'provider_key_unavailable' });

// In both forms of an error event: the `"error"` key and the event name `error`.
const ERROR_WORD = Buffer.from('error');

/**
 * The data of a stream's first event (comments and data-less events before it skipped) when that
 * event is an error (`data: {"error": …}`, or any data of an event named `error`), else null.
 * `first` is the provider's first read; it is decoded and split only when it holds `error` at all,
 * so a stream pays one byte search.
 */
export function leadingErrorEvent(first: Uint8Array): string | null {
  const bytes = Buffer.isBuffer(first) ? first : Buffer.from(first.buffer, first.byteOffset, first.byteLength);
  if (bytes.indexOf(ERROR_WORD) < 0) return null;
  // Not JSON, or cut by the end of the read, and not named error: the relay's business, as any later event's.
  const data = firstReadData(bytes);
  if (data?.named === 'error') return data.payload;
  const value = data?.value as { error?: unknown } | null | undefined;
  return value && typeof value === 'object' && value.error ? data!.payload : null;
}

/** An endpoint URL without any user:password part (some operators put credentials there). */
export function endpointForLog(url: string): string {
  try {
    const parsed = new URL(url);
    if (!parsed.username && !parsed.password) return url;
    parsed.username = '';
    parsed.password = '';
    return parsed.toString();
  } catch {
    return '[unparseable endpoint]';
  }
}
