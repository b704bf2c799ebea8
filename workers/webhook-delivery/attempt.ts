import { EgressRefusedError, type EgressGuard } from '../../services/kit/index.js';
import { signatureHeaders, TIMESTAMP_HEADER } from '../../services/kit/core/index.js';
import { RESPONSE_EXCERPT_BYTES, type DeliveryRow, type WebhookRow } from '../../domains/webhooks/index.js';

/**
 * One HTTP attempt of a delivery: the envelope, the delivery headers, a signature
 * made afresh for this attempt, no redirects followed, and a verdict on the status line:
 * 2xx delivered; 3xx, 4xx and any other status failed for good; 5xx, timeouts and network errors retried.
 * Of the answer's body only the excerpt is read (the rest is never read, whatever its size), and a
 * body still coming when the time is up does not change a verdict the status line already gave.
 */
export interface AttemptResult {
  verdict: 'delivered' | 'failed' | 'retry';
  statusCode: number | null;
  error: string | null;
  durationMs: number;
  /** The first bytes of the answer's body as they came (the store turns them into text). */
  responseHead: Buffer | null;
}

export const USER_AGENT = 'ai-gateway-webhooks/1.0';

export function envelope(delivery: DeliveryRow) {
  return {
    type: delivery.event_type,
    id: delivery.event_id,
    timestamp: new Date(delivery.event_occurred_at).toISOString(),
    webhook_id: delivery.webhook_id,
    retry_count: delivery.attempts,
    data: delivery.event_data,
  };
}

export async function attemptDelivery(options: {
  guard: EgressGuard;
  delivery: DeliveryRow;
  webhook: WebhookRow;
  /** The subscription's own headers, values opened (`openHeaders`). */
  headers: Record<string, string>;
  /** The current secret, and the previous one while its grace period lasts. */
  secrets: { current: string; previous?: string | null };
  nowMs: number;
  timeoutMs: number;
}): Promise<AttemptResult> {
  const { delivery, webhook } = options;
  const body = JSON.stringify(envelope(delivery));
  const timestamp = String(Math.floor(options.nowMs / 1000));
  const headers: Record<string, string> = {
    ...options.headers,
    'Content-Type': 'application/json',
    'User-Agent': USER_AGENT,
    [TIMESTAMP_HEADER]: timestamp,
    ...signatureHeaders(options.secrets, timestamp, body),
    'X-Event-Type': delivery.event_type,
    'X-Event-ID': delivery.event_id,
    'X-Webhook-ID': webhook.id,
  };
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started);
  try {
    const response = await options.guard.request(webhook.url, {
      method: 'POST',
      headers,
      body,
      timeoutMs: options.timeoutMs,
      signal: AbortSignal.timeout(options.timeoutMs),
      maxRedirects: 0,
      bodyPrefixBytes: RESPONSE_EXCERPT_BYTES,
    });
    const status = response.status;
    const base = { statusCode: status, durationMs: elapsed(), responseHead: response.body.length ? response.body : null };
    if (status >= 200 && status < 300) return { verdict: 'delivered', error: null, ...base };
    // Only 5xx is retried: a status HTTP does not define (600 to 999, which Node's parser lets through) fails like a 4xx.
    if (status >= 500 && status < 600) return { verdict: 'retry', error: `receiver answered ${status}`, ...base };
    if (status >= 300 && status < 400) return { verdict: 'failed', error: `receiver answered ${status}; redirects are not followed`, ...base };
    return { verdict: 'failed', error: `receiver answered ${status}`, ...base };
  } catch (error) {
    const durationMs = elapsed();
    if (error instanceof EgressRefusedError) {
      // A name that does not resolve is a network error (retried); a refused destination is final.
      const verdict = error.reason === 'host name does not resolve' ? 'retry' : 'failed';
      return { verdict, statusCode: null, error: error.message, durationMs, responseHead: null };
    }
    const err = error as NodeJS.ErrnoException;
    const timedOut = err.name === 'TimeoutError' || err.name === 'AbortError' || err.code === 'ETIMEDOUT' || err.code === 'ABORT_ERR';
    const message = timedOut ? `timed out after ${options.timeoutMs} ms` : `network error: ${err.code ?? err.message}`;
    return { verdict: 'retry', statusCode: null, error: message, durationMs, responseHead: null };
  }
}
