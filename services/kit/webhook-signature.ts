import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * Webhook signatures. Dependency-free (only `node:crypto`): receivers may copy this one file into
 * their own code base. The platform signs with `signatureHeaders`; receivers check with
 * `verifyWebhookSignature`.
 *
 *   X-Timestamp:          <unix seconds of this attempt>
 *   X-Signature:          sha256=<hex HMAC-SHA256(current secret, `${X-Timestamp}.${raw body}`)>
 *   X-Signature-Previous: sha256=<hex HMAC-SHA256(previous secret, same message)>
 *
 * `X-Signature` always carries exactly one signature, made with the current secret, so a receiver
 * that knows only the plain scheme keeps working through a rotation. `X-Signature-Previous` is
 * present only during a rotation's grace period: a receiver still configured with the old secret
 * verifies that one until it has switched. Bare hex (no `sha256=` prefix) is accepted too.
 */

export const SIGNATURE_TOLERANCE_SECONDS = 300;
export const SIGNATURE_HEADER = 'X-Signature';
export const PREVIOUS_SIGNATURE_HEADER = 'X-Signature-Previous';
export const TIMESTAMP_HEADER = 'X-Timestamp';

/** Hex HMAC-SHA256 of `${timestamp}.${body}`. */
export function computeSignature(secret: string, timestamp: string | number, body: string | Buffer): string {
  const hmac = createHmac('sha256', secret);
  hmac.update(`${timestamp}.`);
  hmac.update(body);
  return hmac.digest('hex');
}

/** One header value: `sha256=<hex>`. */
export function signatureHeader(secret: string, timestamp: string | number, body: string | Buffer): string {
  return `sha256=${computeSignature(secret, timestamp, body)}`;
}

/** The signature headers of one attempt: the current secret's, and the previous one's while it is still honoured. */
export function signatureHeaders(
  secrets: { current: string; previous?: string | null },
  timestamp: string | number,
  body: string | Buffer,
): Record<string, string> {
  const headers: Record<string, string> = { [SIGNATURE_HEADER]: signatureHeader(secrets.current, timestamp, body) };
  if (secrets.previous) headers[PREVIOUS_SIGNATURE_HEADER] = signatureHeader(secrets.previous, timestamp, body);
  return headers;
}

export type VerifyFailure = 'missing_signature' | 'missing_timestamp' | 'timestamp_too_old' | 'timestamp_in_future' | 'signature_mismatch';

export interface VerifyInput {
  /** The raw request body exactly as received (not re-serialised JSON). */
  body: string | Buffer;
  /** The `X-Signature` header. */
  signature: string | undefined | null;
  /** The `X-Signature-Previous` header, if any (present during the platform's rotation grace period). */
  previousSignature?: string | undefined | null;
  /** The `X-Timestamp` header (Unix seconds). */
  timestamp: string | undefined | null;
  /** The webhook secret, or several (e.g. while you rotate on your side). An empty or missing one verifies nothing. */
  secret: string | string[];
  /** Maximum age of X-Timestamp in seconds (default 300, also when not a finite number >= 0); also the allowed clock skew into the future. */
  toleranceSeconds?: number;
  /** Current time in ms (default Date.now()); for tests. */
  now?: number;
}

export type VerifyResult = { ok: true } | { ok: false; reason: VerifyFailure };

const hexOf = (value: string | undefined | null): string[] =>
  (value ?? '')
    .split(',')
    .map((part) => part.trim().replace(/^sha256=/i, '').toLowerCase())
    .filter((hex) => /^[0-9a-f]{64}$/.test(hex));

/**
 * Verifies a delivery: timestamp fresh (replay protection), then a signature from either header
 * matches one of your secrets, compared in constant time.
 */
export function verifyWebhookSignature(input: VerifyInput): VerifyResult {
  if (!input.signature && !input.previousSignature) return { ok: false, reason: 'missing_signature' };
  const timestamp = (input.timestamp ?? '').trim();
  if (!/^\d{1,12}$/.test(timestamp)) return { ok: false, reason: 'missing_timestamp' };
  // Not a number of seconds (NaN from a setting that is unset, a negative value): the default window,
  // never none at all.
  const given = input.toleranceSeconds;
  const tolerance = typeof given === 'number' && Number.isFinite(given) && given >= 0 ? given : SIGNATURE_TOLERANCE_SECONDS;
  const nowSeconds = Math.floor((input.now ?? Date.now()) / 1000);
  const age = nowSeconds - Number(timestamp);
  if (age > tolerance) return { ok: false, reason: 'timestamp_too_old' };
  if (age < -tolerance) return { ok: false, reason: 'timestamp_in_future' };

  const candidates = [...hexOf(input.signature), ...hexOf(input.previousSignature)];
  // Anyone can sign with an empty key: an empty secret verifies nothing, and neither does a missing one
  // (`process.env.WEBHOOK_SECRET` of an unset setting is undefined, whatever the types said).
  const listed = Array.isArray(input.secret) ? input.secret : [input.secret];
  const secrets = listed.filter((secret): secret is string => typeof secret === 'string' && secret.length > 0);
  let matched = false;
  for (const secret of secrets) {
    const expected = Buffer.from(computeSignature(secret, timestamp, input.body), 'hex');
    for (const candidate of candidates) {
      // No early exit: every comparison runs, each in constant time.
      if (timingSafeEqual(expected, Buffer.from(candidate, 'hex'))) matched = true;
    }
  }
  return matched ? { ok: true } : { ok: false, reason: 'signature_mismatch' };
}
