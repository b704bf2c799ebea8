import { z } from 'zod';
import { pageQuery } from '../../kit/index.js';
import { isValidPattern, RESERVED_HEADERS } from '../../../domains/webhooks/index.js';

/** Requests and answers of the webhook admin API. */

const url = z
  .string()
  .max(2048)
  .refine((value) => {
    try {
      const u = new URL(value);
      return (u.protocol === 'http:' || u.protocol === 'https:') && !u.username && !u.password;
    } catch {
      return false;
    }
  }, 'must be an absolute http(s) URL without credentials');

const pattern = z
  .string()
  .refine(isValidPattern, 'must be an event type (e.g. conversation.created), a family wildcard (conversation.*, message.*, model.*, mcp_tool.*) or *');

const events = z
  .array(pattern)
  .min(1, 'must list at least one event pattern')
  .max(50)
  .transform((list) => [...new Set(list)]);

const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$/;

const headers = z.record(z.string(), z.string().max(2048).regex(/^[^\r\n\0]*$/, 'must not contain line breaks')).superRefine((value, ctx) => {
  const names = Object.keys(value);
  if (names.length > 20) ctx.addIssue({ code: 'custom', message: 'at most 20 headers' });
  for (const name of names) {
    if (!HEADER_NAME.test(name)) ctx.addIssue({ code: 'custom', path: [name], message: 'is not a valid header name' });
    else if (RESERVED_HEADERS.has(name.toLowerCase())) ctx.addIssue({ code: 'custom', path: [name], message: 'is set by the delivery and cannot be overridden' });
  }
});

const secret = z.string().min(16, 'must be at least 16 characters').max(256);

export const createWebhookSchema = z.strictObject({
  url,
  events,
  active: z.boolean().optional(),
  secret: secret.optional(),
  headers: headers.optional(),
});

export const updateWebhookSchema = z.strictObject({
  url: url.optional(),
  events: events.optional(),
  active: z.boolean().optional(),
  secret: secret.optional(),
  headers: headers.optional(),
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
  headers: z.record(z.string(), z.string()),
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
