/**
 * Event types of SPEC.md 6.1, the subscription patterns of 6.2, and the names shared by the admin
 * API and workers/webhook-delivery (queues, job headers).
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

export const EVENT_FAMILIES = ['conversation', 'message', 'model', 'mcp_tool'] as const;

const VALID_PATTERNS = new Set<string>(['*', ...EVENT_TYPES, ...EVENT_FAMILIES.map((f) => `${f}.*`)]);

export function isValidPattern(pattern: string): boolean {
  return VALID_PATTERNS.has(pattern);
}

/** `*` matches every event; `family.*` every type of that family; anything else matches exactly. */
export function patternMatches(pattern: string, type: string): boolean {
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

/** Delivery headers of SPEC.md 6.4 (and transport headers) that registration headers may not set. */
export const RESERVED_HEADERS = new Set([
  'content-type',
  'content-length',
  'x-signature',
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
