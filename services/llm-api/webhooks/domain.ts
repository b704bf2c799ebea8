import {
  ApiError,
  badRequest,
  conflict,
  storedUrlRefusal,
  egressError,
  listEnvelope,
  newId,
  randomBase62,
  type Bus,
  type Clock,
  type EgressGuard,
  type Logger,
  type Page,
  type SecretBox,
} from '../../kit/index.js';
import {
  openHeaders,
  REDACTED_HEADER_VALUE,
  redactedHeaders,
  sealHeaders,
  sendDeliveryJob,
  TEST_EVENT_TYPE,
  type AttemptRow,
  type DeliveriesStore,
  type DeliveryRow,
  type DeliveryStatus,
  type WebhookPatch,
  type WebhookRow,
  type WebhooksStore,
} from '../../../domains/webhooks/index.js';
import { customHeaderBytes, HEADERS_TOO_LARGE, MAX_CUSTOM_HEADER_BYTES, type CreateWebhookInput, type UpdateWebhookInput } from './schemas.js';

/** Webhook subscriptions and their deliveries: what the admin API does, without HTTP. */
export interface WebhooksDeps {
  webhooks: WebhooksStore;
  deliveries: DeliveriesStore;
  box: SecretBox;
  guard: EgressGuard;
  bus: Bus;
  clock: Clock;
  logger: Logger;
  secretGraceSeconds: number;
  /** Bound of a URL's check at create and PATCH, its host name's resolution included (WEBHOOK_TIMEOUT_MS). */
  checkTimeoutMs: number;
}

const unix = (date: Date | null | undefined) => (date ? Math.floor(new Date(date).getTime() / 1000) : null);

export function generateSecret(): string {
  return `whsec_${randomBase62(32)}`;
}

export function presentWebhook(row: WebhookRow, now: number, secret?: string) {
  const graceUntil = row.previous_secret_expires_at && new Date(row.previous_secret_expires_at).getTime() > now ? row.previous_secret_expires_at : null;
  return {
    id: row.id,
    object: 'webhook' as const,
    url: row.url,
    events: row.events,
    active: row.active,
    // Write-only, like the secret: names, each value replaced by the marker.
    headers: redactedHeaders(row),
    created_at: unix(row.created_at)!,
    updated_at: unix(row.updated_at)!,
    previous_secret_expires_at: unix(graceUntil),
    ...(secret !== undefined ? { secret } : {}),
  };
}

export function presentDelivery(row: DeliveryRow, attempts: AttemptRow[]) {
  return {
    id: row.id,
    object: 'webhook.delivery' as const,
    webhook_id: row.webhook_id,
    event_id: row.event_id,
    event_type: row.event_type,
    status: row.status,
    attempt_count: row.attempts,
    next_attempt_at: row.status === 'pending' ? unix(row.next_attempt_at) : null,
    last_status_code: row.last_status_code,
    last_error: row.last_error,
    delivered_at: unix(row.delivered_at),
    created_at: unix(row.created_at)!,
    updated_at: unix(row.updated_at)!,
    attempts: attempts.map((a) => ({
      attempt: a.attempt,
      retry_count: a.retry_count,
      outcome: a.outcome,
      status_code: a.status_code,
      duration_ms: a.duration_ms,
      error: a.error,
      attempted_at: unix(a.attempted_at)!,
      next_attempt_at: unix(a.next_attempt_at),
    })),
  };
}

/**
 * Refuses targets the egress guard would refuse at delivery time (private, loopback, link-local…).
 * The host name's resolution is bounded by `checkTimeoutMs`: a DNS server that never answers must
 * not hold the admin request.
 */
async function checkTarget(deps: WebhooksDeps, url: string): Promise<void> {
  // A name that does not resolve today (or not in time) may resolve later: delivery checks again (and retries).
  const refused = await storedUrlRefusal(deps.guard, url, deps.checkTimeoutMs);
  if (refused) throw egressError(refused, 'url');
}

export async function createWebhook(deps: WebhooksDeps, input: CreateWebhookInput, createdBy: string) {
  await checkTarget(deps, input.url);
  const id = newId('webhook');
  const secret = input.secret ?? generateSecret();
  const row = await deps.webhooks.insert(
    {
      id,
      url: input.url,
      events: input.events,
      active: input.active ?? true,
      headers: sealHeaders(deps.box, id, input.headers ?? {}),
      secret_sealed: deps.box.seal(secret, id),
      created_by: createdBy,
    },
    new Date(deps.clock.now()),
  );
  return presentWebhook(row, deps.clock.now(), secret);
}

export async function listWebhooks(deps: WebhooksDeps, page: Page) {
  const { rows, total } = await deps.webhooks.list(page);
  const now = deps.clock.now();
  return listEnvelope(rows.map((r) => presentWebhook(r, now)), total, page);
}

async function mustGet(deps: WebhooksDeps, id: string): Promise<WebhookRow> {
  const row = await deps.webhooks.get(id);
  if (!row) throw new ApiError(404, `No webhook with id ${id}`, { param: 'webhook_id' });
  return row;
}

export async function getWebhook(deps: WebhooksDeps, id: string) {
  return presentWebhook(await mustGet(deps, id), deps.clock.now());
}

/**
 * The new secret signs at once; the old one keeps signing (second signature) for the grace period.
 * The old one is the secret current when the update runs (not as read before it), so of two
 * rotations at once the later keeps the earlier's secret as its previous one.
 */
function rotation(deps: WebhooksDeps, row: WebhookRow, secret: string): WebhookPatch {
  const grace = deps.secretGraceSeconds;
  return {
    secret_sealed: deps.box.seal(secret, row.id),
    ...(grace > 0 ? { previous_secret_from_current: true } : { previous_secret_sealed: null }),
    previous_secret_expires_at: grace > 0 ? new Date(deps.clock.now() + grace * 1000) : null,
  };
}

/**
 * A PATCH's `headers` is the whole new set (a header not named is removed); each value given
 * replaces the stored one, and the marker (`[redacted]`, as the answers show every value) keeps the
 * value stored under that name (case-insensitive), so an answer can be sent back unchanged. The
 * marker for a header that is not stored has no value to keep: 400 naming it. When the PATCH moves
 * the webhook to another origin (`newOrigin`), no stored value is kept either: they were given for
 * the old receiver (its token…) and must not be sent to another host; 400 naming the header.
 */
function headersToStore(deps: WebhooksDeps, row: WebhookRow, given: Record<string, string>, newOrigin: boolean): Record<string, string> {
  const out: Record<string, string> = {};
  // Stored names, case-insensitively; only the values kept are opened.
  const stored = new Map(Object.keys(row.headers ?? {}).map((n) => [n.toLowerCase(), n]));
  for (const [name, value] of Object.entries(given)) {
    if (value !== REDACTED_HEADER_VALUE) {
      out[name] = value;
      continue;
    }
    if (newOrigin) {
      throw badRequest(
        `the url moves this webhook to another origin (scheme, host or port), so stored header values are not kept for it: give the value of header ${name}`,
        `headers.${name}`,
        'invalid_parameter',
      );
    }
    const storedName = stored.get(name.toLowerCase());
    if (storedName === undefined) throw badRequest(`"${REDACTED_HEADER_VALUE}" keeps a stored value, and this webhook has no header ${name}; give its value`, `headers.${name}`, 'invalid_parameter');
    try {
      out[name] = openHeaders(deps.box, { id: row.id, headers: { [storedName]: row.headers[storedName]! } })[storedName]!;
    } catch {
      // Sealed under another MASTER_KEY (or altered): it cannot be kept; its value must be given again.
      throw badRequest(`the stored value of header ${name} is sealed but does not open with this MASTER_KEY; give its value`, `headers.${name}`, 'invalid_parameter');
    }
  }
  // A kept value may be longer than the marker that stood for it.
  if (customHeaderBytes(out) > MAX_CUSTOM_HEADER_BYTES) throw badRequest(`headers ${HEADERS_TOO_LARGE}`, 'headers', 'invalid_parameter');
  return out;
}

/** Scheme, host and port of a URL (default ports and letter case normalised); the URL itself when it does not parse. */
function originOf(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return url;
  }
}

export async function updateWebhook(deps: WebhooksDeps, id: string, input: UpdateWebhookInput) {
  const row = await mustGet(deps, id);
  if (input.url !== undefined) await checkTarget(deps, input.url);
  // Custom header values (a receiver's token) belong to the receiver they were given for: a PATCH
  // moving the webhook to another origin carries none over. One that does not send `headers` while
  // the webhook has some is refused rather than silently dropping them.
  const newOrigin = input.url !== undefined && originOf(input.url) !== originOf(row.url);
  if (newOrigin && input.headers === undefined && Object.keys(row.headers ?? {}).length > 0) {
    throw badRequest(
      'the url moves this webhook to another origin (scheme, host or port), and its custom header values are not sent to another host: send headers again with their values, or headers: {} to remove them',
      'headers',
      'invalid_parameter',
    );
  }
  const patch: WebhookPatch = {};
  if (input.url !== undefined) patch.url = input.url;
  if (input.events !== undefined) patch.events = input.events;
  if (input.active !== undefined) patch.active = input.active;
  if (input.headers !== undefined) patch.headers = sealHeaders(deps.box, id, headersToStore(deps, row, input.headers, newOrigin));
  if (input.secret !== undefined) Object.assign(patch, rotation(deps, row, input.secret));
  // Header values (kept ones opened from `row`) and whether the url moves to another origin were
  // all judged against the url and headers read above: written only while the row still has them
  // (compare-and-set), so no PATCH meanwhile (moving the webhook, adding headers) is overwritten
  // into a url whose receiver was never given those values. A url within the same origin counts:
  // judged "same origin" against a url another PATCH has since moved, it would bring the other
  // host's values back to this one.
  const guarded = patch.headers !== undefined || patch.url !== undefined;
  const updated = await deps.webhooks.update(id, patch, new Date(deps.clock.now()), guarded ? row : undefined);
  if (!updated) {
    const current = guarded ? await deps.webhooks.get(id) : undefined;
    if (current) {
      const moved = current.url !== row.url;
      throw conflict(`webhook ${id} was changed while this request ran (its ${moved ? 'url' : 'headers'}); read it again and resend`, moved ? 'url' : 'headers');
    }
    throw new ApiError(404, `No webhook with id ${id}`, { param: 'webhook_id' });
  }
  return presentWebhook(updated, deps.clock.now());
}

export async function rotateSecret(deps: WebhooksDeps, id: string) {
  const row = await mustGet(deps, id);
  const secret = generateSecret();
  const updated = await deps.webhooks.update(id, rotation(deps, row, secret), new Date(deps.clock.now()));
  if (!updated) throw new ApiError(404, `No webhook with id ${id}`, { param: 'webhook_id' });
  return presentWebhook(updated, deps.clock.now(), secret);
}

export async function deleteWebhook(deps: WebhooksDeps, id: string): Promise<void> {
  if (!(await deps.webhooks.remove(id))) throw new ApiError(404, `No webhook with id ${id}`, { param: 'webhook_id' });
}

export async function listDeliveries(deps: WebhooksDeps, webhookId: string, page: Page, status?: DeliveryStatus) {
  await mustGet(deps, webhookId);
  const { rows, total } = await deps.deliveries.list(webhookId, page, status);
  const attempts = await deps.deliveries.attemptsOf(rows.map((r) => r.id));
  return listEnvelope(rows.map((r) => presentDelivery(r, attempts.filter((a) => a.delivery_id === r.id))), total, page);
}

export async function getDelivery(deps: WebhooksDeps, webhookId: string, deliveryId: string) {
  // An unknown webhook is named as such (like the list of its deliveries), not as an unknown delivery.
  await mustGet(deps, webhookId);
  const row = await deps.deliveries.get(webhookId, deliveryId);
  if (!row) throw new ApiError(404, `No delivery with id ${deliveryId}`, { param: 'delivery_id' });
  return presentDelivery(row, await deps.deliveries.attemptsOf([row.id]));
}

/** Sends a finished (delivered, failed or dead) delivery again: a new run of the retry schedule. */
export async function redeliver(deps: WebhooksDeps, webhookId: string, deliveryId: string) {
  const webhook = await mustGet(deps, webhookId);
  // An inactive subscription gets no attempt: reopening would only have the worker end the delivery
  // `failed` ("webhook is inactive"), overwriting the outcome it had (a delivered one included).
  if (!webhook.active) {
    if (!(await deps.deliveries.get(webhookId, deliveryId))) throw new ApiError(404, `No delivery with id ${deliveryId}`, { param: 'delivery_id' });
    throw new ApiError(409, 'The webhook is inactive; activate it before redelivering', { param: 'webhook_id' });
  }
  const reopened = await deps.deliveries.reopen(webhookId, deliveryId, new Date(deps.clock.now()));
  if (!reopened) {
    const existing = await deps.deliveries.get(webhookId, deliveryId);
    if (!existing) throw new ApiError(404, `No delivery with id ${deliveryId}`, { param: 'delivery_id' });
    throw new ApiError(409, 'The delivery is still pending; it is already scheduled', { param: 'delivery_id' });
  }
  try {
    await sendDeliveryJob(deps.bus, reopened);
  } catch (error) {
    // The delivery is pending and overdue: the worker's sweep enqueues it once the broker is back.
    deps.logger.warn({ err: (error as Error).message, delivery_id: reopened.id }, 'redelivery not enqueued; the sweep will pick it up');
  }
  return presentDelivery(reopened, await deps.deliveries.attemptsOf([reopened.id]));
}

/**
 * Sends a signed `webhook.test` event to one subscription, whatever its patterns, through the
 * normal delivery path (same signing, headers, retries and records), so what the receiver checks
 * is exactly what real events will look like. Answers the pending delivery to follow.
 */
export async function sendTestEvent(deps: WebhooksDeps, webhookId: string) {
  const webhook = await mustGet(deps, webhookId);
  if (!webhook.active) throw new ApiError(409, 'The webhook is inactive; activate it before sending a test event', { param: 'webhook_id' });
  const now = new Date(deps.clock.now());
  const id = newId('webhookDelivery');
  const gone = () => new ApiError(404, `No webhook with id ${webhookId}`, { param: 'webhook_id' });
  await deps.deliveries.insertMissing(
    [
      {
        id,
        webhook_id: webhook.id,
        event_id: newId('event'),
        event_type: TEST_EVENT_TYPE,
        event_occurred_at: now,
        event_data: { webhook_id: webhook.id, message: 'A test event sent from the admin API; no platform data changed.' },
      },
    ],
    now,
  ).catch((error) => {
    // Deleted since it was read (a DELETE at the same moment): its deliveries' foreign key refuses the row.
    throw (error as { code?: string }).code === '23503' ? gone() : error;
  });
  const delivery = await deps.deliveries.get(webhook.id, id);
  if (!delivery) throw gone();
  try {
    await sendDeliveryJob(deps.bus, delivery);
    await deps.deliveries.markQueued([id]);
  } catch (error) {
    // Pending and not queued: the worker's sweep enqueues it once the broker is back.
    deps.logger.warn({ err: (error as Error).message, webhook_id: webhook.id, delivery_id: id }, 'test event not enqueued; the sweep will pick it up');
  }
  return presentDelivery(delivery, []);
}
