import { z } from 'zod';

export const toolNameParams = z.object({ name: z.string().min(1).max(64) });

export const patchToolBody = z
  .object({
    enabled: z.boolean(),
    reason: z.string().trim().max(500).nullable().optional(),
  })
  .strict();

export const adminToolSchema = z.object({
  id: z.string(),
  object: z.literal('mcp_tool'),
  name: z.string(),
  title: z.string(),
  description: z.string(),
  enabled: z.boolean(),
  reason: z.string().nullable(),
  available: z.boolean(),
  unavailable_reason: z.string().nullable(),
  updated_at: z.string().nullable(),
  updated_by: z.string().nullable(),
});

export const adminToolListSchema = z.object({ object: z.literal('list'), data: z.array(adminToolSchema) });
