import { z } from 'zod';

const httpUrl = z
  .string()
  .max(2048)
  .url()
  .refine((v) => /^https?:\/\//i.test(v), 'must be an http(s) URL');

export const endpointSchema = z
  .object({
    url: httpUrl,
    healthy: z.boolean().default(true),
    priority: z.number().int().min(0).max(1_000_000).default(0),
    weight: z.number().int().min(0).max(1_000_000).default(1),
  })
  .strict();

const metadata = z.record(z.string().min(1).max(64), z.string().max(512)).refine((m) => Object.keys(m).length <= 64, 'at most 64 pairs');

export const registerProviderSchema = z
  .object({
    name: z.string().trim().min(1).max(200),
    vendor: z.string().trim().min(1).max(100),
    category: z.enum(['llm', 'image']).default('llm'),
    base_url: httpUrl.optional(),
    url: httpUrl.optional(),
    api_key: z.string().min(1).max(8192).optional(),
    active: z.boolean().default(true),
    default_provider_image_edit: z.boolean().default(false),
    default_provider_image_generate: z.boolean().default(false),
    endpoints: z.array(endpointSchema).max(64).optional(),
    metadata: metadata.optional(),
  })
  .strict();

export const patchProviderSchema = z
  .object({
    name: z.string().trim().min(1).max(200).optional(),
    base_url: httpUrl.optional(),
    url: httpUrl.optional(),
    // null or "" removes the key.
    api_key: z.string().max(8192).nullable().optional(),
    active: z.boolean().optional(),
    default_provider_image_edit: z.boolean().optional(),
    default_provider_image_generate: z.boolean().optional(),
    endpoints: z.array(endpointSchema).max(64).optional(),
    metadata: metadata.optional(),
  })
  .strict();

export type RegisterProviderInput = z.infer<typeof registerProviderSchema>;
export type PatchProviderInput = z.infer<typeof patchProviderSchema>;
