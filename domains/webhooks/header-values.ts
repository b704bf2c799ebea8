import type { Logger, SecretBox } from '../../services/kit/index.js';
import type { WebhookRow, WebhooksStore } from './store.js';

/**
 * A subscription's custom headers (e.g. `Authorization: Bearer …` for its receiver) are write-only,
 * like its secret: the admin API answers their names with this marker as every value, and each
 * value is stored sealed with the kit's secret box (AES-256-GCM), bound to the webhook and the
 * header's name, so a value moved to another header or row does not open. The delivery worker
 * opens them to send the real values.
 */
export const REDACTED_HEADER_VALUE = '[redacted]';

/**
 * What the secret box's `seal` writes: `v1.<12-byte nonce>.<16-byte tag>.<ciphertext>`, base64url
 * without padding (services/kit/crypto-box.ts). Sealing is marked per value by this format, not per
 * row: a value in any other form was written by code from before values were sealed and is in clear
 * (a header value may hold only tab, space and visible ASCII, and older code never sealed one).
 * The same pattern (POSIX-compatible) finds the values still to seal in SQL.
 */
export const SEALED_HEADER_VALUE = /^v1\.[A-Za-z0-9_-]{16}\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]*$/;

export const isSealedHeaderValue = (value: string) => SEALED_HEADER_VALUE.test(value);

/** A value in the sealed format that does not open: sealed under another MASTER_KEY, or altered. */
export class HeaderValueUnopenable extends Error {
  constructor(readonly header: string) {
    super(`the stored value of webhook header ${header} is sealed but does not open with this MASTER_KEY (sealed under another key, or altered)`);
  }
}

/** What a value is bound to: its webhook and the header's name (as registered). */
const aad = (webhookId: string, name: string) => `${webhookId}/headers/${name}`;

/** Header names with every value replaced by the marker: what the admin API shows. */
export function redactedHeaders(row: Pick<WebhookRow, 'headers'>): Record<string, string> {
  return Object.fromEntries(Object.keys(row.headers ?? {}).map((name) => [name, REDACTED_HEADER_VALUE]));
}

/** `headers` (values in clear) of webhook `webhookId` as stored: each value sealed. */
export function sealHeaders(box: SecretBox, webhookId: string, headers: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(headers).map(([name, value]) => [name, box.seal(value, aad(webhookId, name))]));
}

/**
 * The values to send. A value in the sealed format is opened; any other value was written by code
 * from before values were sealed (a row not sealed at start yet, or written meanwhile by an older
 * llm-api) and is in clear. Throws `HeaderValueUnopenable` naming the first value that does not open.
 */
export function openHeaders(box: SecretBox, row: Pick<WebhookRow, 'id' | 'headers'>): Record<string, string> {
  return Object.fromEntries(
    Object.entries(row.headers ?? {}).map(([name, value]) => {
      if (!isSealedHeaderValue(value)) return [name, value];
      try {
        return [name, box.open(value, aad(row.id, name))];
      } catch {
        throw new HeaderValueUnopenable(name);
      }
    }),
  );
}

/**
 * Seals every header value not in the sealed format (written by code from before values were
 * sealed; a migration has no key to seal with). llm-api and the worker run it when they start; a
 * row is rewritten only if it still holds the headers read (compare-and-set), so two processes at
 * once, or a PATCH meanwhile, never lose a value; values already sealed are kept as they are.
 * Returns how many rows it sealed.
 */
export async function sealPlainHeaders(deps: { webhooks: WebhooksStore; box: SecretBox; logger: Logger }, batch = 500): Promise<number> {
  let total = 0;
  let after: string | undefined;
  for (;;) {
    const rows = await deps.webhooks.withPlainHeaders(SEALED_HEADER_VALUE.source, batch, after);
    for (const row of rows) {
      const next = Object.fromEntries(
        Object.entries(row.headers).map(([name, value]) => [name, isSealedHeaderValue(value) ? value : sealHeaders(deps.box, row.id, { [name]: value })[name]!]),
      );
      if (await deps.webhooks.replaceHeaders(row.id, row.headers, next)) total++;
    }
    if (rows.length < batch) break;
    after = rows[rows.length - 1]!.id;
  }
  if (total) deps.logger.info({ count: total }, 'sealed the custom header values of webhook subscriptions stored in clear by older code');
  return total;
}
