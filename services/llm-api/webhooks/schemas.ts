import { z } from 'zod';
import { pageQuery } from '../../kit/index.js';
import { isValidPattern, REDACTED_HEADER_VALUE, RESERVED_HEADERS } from '../../../domains/webhooks/index.js';

/** Requests and answers of the webhook admin API. */

/** Stored without surrounding whitespace (as a URL parser reads it); port 0 can never be connected to. */
const url = z
  .string()
  .trim()
  .max(2048)
  .refine((value) => {
    try {
      const u = new URL(value);
      return (u.protocol === 'http:' || u.protocol === 'https:') && !u.username && !u.password && u.port !== '0';
    } catch {
      return false;
    }
  }, 'must be an absolute http(s) URL without credentials, on a port other than 0');

const pattern = z
  .string()
  .refine(isValidPattern, 'must be an event type (e.g. conversation.created), a family wildcard (conversation.*, message.*, model.*, mcp_tool.*) or *');

const events = z
  .array(pattern)
  .min(1, 'must list at least one event pattern')
  .max(50)
  .transform((list) => [...new Set(list)]);

const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$/;
/**
 * What a delivery sends unchanged as a header value: tab, space and visible ASCII. Node's HTTP
 * client refuses other control characters and anything beyond U+00FF (ERR_INVALID_CHAR, on every
 * attempt); U+0080 to U+00FF it does not refuse, but sends as UTF-8 when the header goes out with
 * a string body (as deliveries do) and as Latin-1 otherwise, so a receiver would not read the value
 * that was registered. RFC 9110 (5.5) limits new field values to US-ASCII as well.
 */
const HEADER_VALUE = /^[\t\x20-\x7e]*$/;
/** At most 20 custom headers, and at most this many bytes of them on the wire ("Name: value\r\n" each). */
const MAX_CUSTOM_HEADERS = 20;
export const MAX_CUSTOM_HEADER_BYTES = 8192;
export const HEADERS_TOO_LARGE = `must total at most ${MAX_CUSTOM_HEADER_BYTES} bytes (each header counted as "Name: value" plus a line break)`;
/** Bytes of custom headers on the wire, "Name: value\r\n" each (names and values that pass their checks are one byte per character). */
export const customHeaderBytes = (value: Record<string, string>) => Object.entries(value).reduce((sum, [name, v]) => sum + name.length + 2 + v.length + 2, 0);

const headers = z
  .record(z.string(), z.string().max(2048).regex(HEADER_VALUE, 'may hold only tab, space and visible ASCII characters (no line breaks, other control characters or non-ASCII text)'))
  .superRefine((value, ctx) => {
    const names = Object.keys(value);
    if (names.length > MAX_CUSTOM_HEADERS) ctx.addIssue({ code: 'custom', message: `at most ${MAX_CUSTOM_HEADERS} headers` });
    // Header names are case-insensitive: two spellings of one name would be sent as one header (the last).
    const seen = new Set<string>();
    for (const name of names) {
      const lower = name.toLowerCase();
      if (!HEADER_NAME.test(name)) ctx.addIssue({ code: 'custom', path: [name], message: 'is not a valid header name' });
      else if (RESERVED_HEADERS.has(lower)) ctx.addIssue({ code: 'custom', path: [name], message: 'is set by the delivery and cannot be overridden' });
      else if (seen.has(lower)) ctx.addIssue({ code: 'custom', path: [name], message: 'is given twice (header names are case-insensitive)' });
      seen.add(lower);
    }
    if (customHeaderBytes(value) > MAX_CUSTOM_HEADER_BYTES) ctx.addIssue({ code: 'custom', message: HEADERS_TOO_LARGE });
  });

/** On create nothing is stored yet: the marker the answers show as every value is no value to keep. */
const newHeaders = headers.superRefine((value, ctx) => {
  for (const name of Object.keys(value)) {
    if (value[name] === REDACTED_HEADER_VALUE) ctx.addIssue({ code: 'custom', path: [name], message: `"${REDACTED_HEADER_VALUE}" is how answers hide a value; give the header's value` });
  }
});

const secret = z.string().min(16, 'must be at least 16 characters').max(256);

export const createWebhookSchema = z.strictObject({
  url,
  events,
  active: z.boolean().optional(),
  secret: secret.optional(),
  headers: newHeaders.optional(),
});

export const updateWebhookSchema = z.strictObject({
  url: url.optional(),
  events: events.optional(),
  active: z.boolean().optional(),
  secret: secret.optional(),
  headers: headers
    .optional()
    .describe(`The whole new set of custom headers (one not named is removed); "${REDACTED_HEADER_VALUE}" as a value keeps the value stored under that name`),
});

const deliveryStatus = z.enum(['pending', 'delivered', 'failed', 'dead']);

export const listDeliveriesQuery = pageQuery().extend({ status: deliveryStatus.optional() });

export const webhookParams = z.object({ webhook_id: z.string() });
export const deliveryParams = z.object({ webhook_id: z.string(), delivery_id: z.string() });

export const webhookObjectSchema = z.object({
  id: z.string(),
  object: z.literal('webhook'),
  url: z.string(),
  events: z.array(z.string()),
  active: z.boolean(),
  headers: z.record(z.string(), z.string()).describe(`Custom header names; every value is "${REDACTED_HEADER_VALUE}" (values are write-only)`),
  created_at: z.number().int(),
  updated_at: z.number().int(),
  previous_secret_expires_at: z.number().int().nullable(),
  secret: z.string().optional().describe('Only in the answers of create and rotate-secret'),
});

export const deliveryObjectSchema = z.object({
  id: z.string(),
  object: z.literal('webhook.delivery'),
  webhook_id: z.string(),
  event_id: z.string(),
  event_type: z.string(),
  status: deliveryStatus,
  attempt_count: z.number().int(),
  next_attempt_at: z.number().int().nullable(),
  last_status_code: z.number().int().nullable(),
  last_error: z.string().nullable(),
  delivered_at: z.number().int().nullable(),
  created_at: z.number().int(),
  updated_at: z.number().int(),
  attempts: z.array(
    z.object({
      attempt: z.number().int(),
      retry_count: z.number().int(),
      outcome: z.enum(['delivered', 'retry', 'failed', 'dead']),
      status_code: z.number().int().nullable(),
      duration_ms: z.number().int(),
      error: z.string().nullable(),
      attempted_at: z.number().int(),
      next_attempt_at: z.number().int().nullable(),
    }),
  ),
});

export type CreateWebhookInput = z.infer<typeof createWebhookSchema>;
export type UpdateWebhookInput = z.infer<typeof updateWebhookSchema>;
