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

/** What a value is bound to: its webhook and the header's name (as registered). */
const aad = (webhookId: string, name: string) => `${webhookId}/headers/${name}`;

/** Header names with every value replaced by the marker: what the admin API shows. */
export function redactedHeaders(row: Pick<WebhookRow, 'headers'>): Record<string, string> {
  return Object.fromEntries(Object.keys(row.headers ?? {}).map((name) => [name, REDACTED_HEADER_VALUE]));
}

/** The columns that store `headers` (values in clear) of webhook `webhookId`: each value sealed. */
export function sealHeaders(box: SecretBox, webhookId: string, headers: Record<string, string>): Pick<WebhookRow, 'headers' | 'headers_sealed'> {
  return { headers: Object.fromEntries(Object.entries(headers).map(([name, value]) => [name, box.seal(value, aad(webhookId, name))])), headers_sealed: true };
}

/**
 * The values to send. A row written before values were sealed (`headers_sealed` false) holds them in
 * clear until `sealPlainHeaders` has run. Throws when a value does not open (another MASTER_KEY).
 */
export function openHeaders(box: SecretBox, row: Pick<WebhookRow, 'id' | 'headers' | 'headers_sealed'>): Record<string, string> {
  const headers = row.headers ?? {};
  if (!row.headers_sealed) return { ...headers };
  return Object.fromEntries(Object.entries(headers).map(([name, sealed]) => [name, box.open(sealed, aad(row.id, name))]));
}

/**
 * Seals the header values of subscriptions written before they were sealed (the migration
 * `20261207_4004_webhooks_headers_sealed` marks them, but has no key to seal with). llm-api and the
 * worker run it when they start; each row is rewritten only if it is still unsealed, so two
 * processes at once, or a PATCH meanwhile, never lose a value. Returns how many rows it sealed.
 */
export async function sealPlainHeaders(deps: { webhooks: WebhooksStore; box: SecretBox; logger: Logger }, batch = 500): Promise<number> {
  let total = 0;
  for (;;) {
    const rows = await deps.webhooks.withPlainHeaders(batch);
    for (const row of rows) {
      if (await deps.webhooks.replacePlainHeaders(row.id, row.headers, sealHeaders(deps.box, row.id, row.headers).headers)) total++;
    }
    if (rows.length < batch) break;
  }
  if (total) deps.logger.info({ count: total }, 'sealed the custom header values of webhook subscriptions stored before values were sealed');
  return total;
}
