import { z } from 'zod';
import { isValidPattern, RESERVED_HEADERS } from './events.js';

/** Request bodies of the webhook admin API (SPEC.md 2.10, 4.5). */

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
  .refine(isValidPattern, 'must be an event type of SPEC.md 6.1 (e.g. conversation.created), a family wildcard (conversation.*, message.*, model.*, mcp_tool.*) or *');

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

export const deliveryStatusQuery = z.object({
  status: z.enum(['pending', 'delivered', 'failed', 'dead']).optional(),
});

export type CreateWebhookInput = z.infer<typeof createWebhookSchema>;
export type UpdateWebhookInput = z.infer<typeof updateWebhookSchema>;
