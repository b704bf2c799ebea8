/**
 * The platform's event types, the subscription patterns, and the names shared by the admin API
 * and workers/webhook-delivery (queues, job headers).
 */
export const EVENT_TYPES = [
  'conversation.created',
  'conversation.updated',
  'conversation.deleted',
  'message.sent',
  'message.edited',
  'message.deleted',
  'model.added',
  'model.updated',
  'mcp_tool.enabled',
  'mcp_tool.disabled',
] as const;

/**
 * Sent only by `POST /v1/admin/webhooks/{id}/test`, to that one subscription whatever its patterns;
 * never published on the bus, so no pattern (not even `*`) subscribes to it.
 */
export const TEST_EVENT_TYPE = 'webhook.test';

export const EVENT_FAMILIES = ['conversation', 'message', 'model', 'mcp_tool'] as const;

const VALID_PATTERNS = new Set<string>(['*', ...EVENT_TYPES, ...EVENT_FAMILIES.map((f) => `${f}.*`)]);

export function isValidPattern(pattern: string): boolean {
  return VALID_PATTERNS.has(pattern);
}

const SUBSCRIBABLE = new Set<string>(EVENT_TYPES);

/**
 * `*` matches every event type above; `family.*` every type of that family; anything else matches
 * exactly. Other types that travel on the same exchange (media's `media.*`, which carry a content
 * hash for deduplication) are internal: no pattern reaches them.
 */
export function patternMatches(pattern: string, type: string): boolean {
  if (!SUBSCRIBABLE.has(type)) return false;
  if (pattern === '*') return true;
  if (pattern.endsWith('.*')) return type.startsWith(pattern.slice(0, -1));
  return pattern === type;
}

export const matchesAny = (patterns: string[], type: string) => patterns.some((p) => patternMatches(p, type));

/** Queue bound to the event exchange with `#`: one message per event, fanned out to subscriptions. */
export const FANOUT_QUEUE = 'webhooks.fanout';
/** One message per delivery attempt to make. */
export const DELIVERY_QUEUE = 'webhooks.deliveries';
/** Job header: how many attempts the delivery had recorded when this job was scheduled. */
export const ATTEMPT_HEADER = 'x-webhook-attempt';
/**
 * Job header: how many times in a row this job was parked because its subscription was busy (each
 * park waits longer); absent on jobs never parked (and on jobs from before it existed), reset to 0
 * once the attempt is made.
 */
export const PARKED_HEADER = 'x-webhook-parked';
/**
 * Job header: the subscription of a parked job (empty once the attempt is made). A job coming back
 * from a park looks for its subscription's slot with it before reading anything, so a job parked
 * again and again costs no database read each time; the delivery and its subscription are read
 * once it has the slot, as for any job.
 */
export const PARKED_FOR_HEADER = 'x-webhook-parked-for';

/** Delivery headers (and transport headers) that a subscription's own headers may not set. */
export const RESERVED_HEADERS = new Set([
  'content-type',
  'content-length',
  // The body goes as it is: a receiver told it is compressed could not read it.
  'content-encoding',
  'x-signature',
  'x-signature-previous',
  'x-timestamp',
  'x-event-type',
  'x-event-id',
  'x-webhook-id',
  'host',
  'connection',
  'keep-alive',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'proxy-authorization',
  'proxy-connection',
  'expect',
  'user-agent',
]);
