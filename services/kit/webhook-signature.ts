import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * Webhook signatures (SPEC.md 6.5). Dependency-free (only `node:crypto`): receivers may copy this
 * one file into their own code base. The platform signs with `signatureHeader`; receivers check
 * with `verifyWebhookSignature`.
 *
 *   X-Timestamp: <unix seconds of this attempt>
 *   X-Signature: sha256=<hex HMAC-SHA256(secret, `${X-Timestamp}.${raw body}`)>
 *
 * During a secret rotation's grace period the header lists two signatures, new first:
 * `sha256=<new>,sha256=<old>`; a match with any listed signature is valid. Bare hex (no
 * `sha256=` prefix) is accepted too, as SPEC.md shows both.
 */

export const SIGNATURE_TOLERANCE_SECONDS = 300;

/** Hex HMAC-SHA256 of `${timestamp}.${body}`. */
export function computeSignature(secret: string, timestamp: string | number, body: string | Buffer): string {
  const hmac = createHmac('sha256', secret);
  hmac.update(`${timestamp}.`);
  hmac.update(body);
  return hmac.digest('hex');
}

/** The `X-Signature` value: one `sha256=<hex>` per secret, in the order given (current first). */
export function signatureHeader(secrets: string[], timestamp: string | number, body: string | Buffer): string {
  return secrets.map((secret) => `sha256=${computeSignature(secret, timestamp, body)}`).join(',');
}

export type VerifyFailure = 'missing_signature' | 'missing_timestamp' | 'timestamp_too_old' | 'timestamp_in_future' | 'signature_mismatch';

export interface VerifyInput {
  /** The raw request body exactly as received (not re-serialised JSON). */
  body: string | Buffer;
  /** The `X-Signature` header. */
  signature: string | undefined | null;
  /** The `X-Timestamp` header (Unix seconds). */
  timestamp: string | undefined | null;
  /** The webhook secret, or several (e.g. while you rotate on your side). */
  secret: string | string[];
  /** Maximum age of X-Timestamp in seconds (default 300); also the allowed clock skew into the future. */
  toleranceSeconds?: number;
  /** Current time in ms (default Date.now()); for tests. */
  now?: number;
}

export type VerifyResult = { ok: true } | { ok: false; reason: VerifyFailure };

/** Verifies a delivery: timestamp fresh (replay protection), then any listed signature matches in constant time. */
export function verifyWebhookSignature(input: VerifyInput): VerifyResult {
  if (!input.signature) return { ok: false, reason: 'missing_signature' };
  const timestamp = (input.timestamp ?? '').trim();
  if (!/^\d{1,12}$/.test(timestamp)) return { ok: false, reason: 'missing_timestamp' };
  const tolerance = input.toleranceSeconds ?? SIGNATURE_TOLERANCE_SECONDS;
  const nowSeconds = Math.floor((input.now ?? Date.now()) / 1000);
  const age = nowSeconds - Number(timestamp);
  if (age > tolerance) return { ok: false, reason: 'timestamp_too_old' };
  if (age < -tolerance) return { ok: false, reason: 'timestamp_in_future' };

  const candidates = input.signature
    .split(',')
    .map((part) => part.trim().replace(/^sha256=/i, '').toLowerCase())
    .filter((hex) => /^[0-9a-f]{64}$/.test(hex));
  const secrets = Array.isArray(input.secret) ? input.secret : [input.secret];
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
