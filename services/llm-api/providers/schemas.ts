import { z } from 'zod';
import { modelSummarySchema } from '../models/schemas.js';

/**
 * A provider URL: http(s), and nothing that could never work. Paths are appended to it as text
 * (`{url}/chat/completions`), so a query or a fragment would swallow them; credentials in it are
 * refused by the egress guard on every call, and would be shown in admin views and change events.
 */
const httpUrl = z
  .string()
  .max(2048)
  .url()
  .refine((v) => /^https?:\/\//i.test(v), 'must be an http(s) URL')
  .refine((v) => !hasCredentials(v), 'must not carry credentials (user:password@): send the key as api_key')
  .refine((v) => !v.includes('?') && !v.includes('#'), 'must not have a query string or a fragment (paths are appended to it)');

function hasCredentials(url: string): boolean {
  try {
    const parsed = new URL(url);
    return parsed.username !== '' || parsed.password !== '';
  } catch {
    return false; // not a URL: `.url()` says so
  }
}

/** The same endpoint whatever its letter case in scheme and host, or a trailing slash. */
export const endpointKey = (url: string) => {
  try {
    return new URL(url).href.replace(/\/+$/, '');
  } catch {
    return url;
  }
};

/**
 * An API key goes out in the `Authorization` header: a character that cannot travel there (a
 * newline pasted with it, a space, a letter outside ASCII) would fail every call to the provider.
 */
const API_KEY = /^[\x21-\x7e]+$/;
const apiKeyMessage = 'must be printable ASCII without spaces or line breaks (as pasted keys sometimes carry)';

/**
 * An endpoint as an admin configures it. `enabled` is the administrative switch (false takes it out
 * of rotation); `healthy` is its older name, still accepted, and ignored when `enabled` is given, so
 * an endpoint copied from the admin view (where `healthy` is the live health) keeps its switch.
 */
export const endpointSchema = z
  .object({
    url: httpUrl,
    enabled: z.boolean().optional(),
    healthy: z.boolean().default(true),
    priority: z.number().int().min(0).max(1_000_000).default(0),
    weight: z.number().int().min(0).max(1_000_000).default(1),
  })
  .strict();

/** A provider's endpoints: one URL at most once (twice, it would be tried twice per request and its health counted double). */
const endpointList = z
  .array(endpointSchema)
  .max(64)
  .superRefine((endpoints, ctx) => {
    const seen = new Set<string>();
    endpoints.forEach((e, i) => {
      const key = endpointKey(e.url);
      if (seen.has(key)) ctx.addIssue({ code: 'custom', path: [i, 'url'], message: 'the same URL is already an endpoint of this provider' });
      seen.add(key);
    });
  });

const metadata = z.record(z.string().min(1).max(64), z.string().max(512)).refine((m) => Object.keys(m).length <= 64, 'at most 64 pairs');

export const registerProviderSchema = z
  .object({
    name: z.string().trim().min(1).max(200),
    vendor: z.string().trim().min(1).max(100),
    category: z.enum(['llm', 'image']).default('llm'),
    base_url: httpUrl.optional(),
    url: httpUrl.optional(),
    api_key: z.string().min(1).max(8192).regex(API_KEY, apiKeyMessage).optional(),
    active: z.boolean().default(true),
    default_provider_image_edit: z.boolean().default(false),
    default_provider_image_generate: z.boolean().default(false),
    endpoints: endpointList.optional(),
    metadata: metadata.optional(),
  })
  .strict();

export const patchProviderSchema = z
  .object({
    name: z.string().trim().min(1).max(200).optional(),
    base_url: httpUrl.optional(),
    url: httpUrl.optional(),
    // null or "" removes the key.
    api_key: z
      .string()
      .max(8192)
      .refine((v) => v === '' || API_KEY.test(v), apiKeyMessage)
      .nullable()
      .optional(),
    active: z.boolean().optional(),
    default_provider_image_edit: z.boolean().optional(),
    default_provider_image_generate: z.boolean().optional(),
    endpoints: endpointList.optional(),
    metadata: metadata.optional(),
  })
  .strict();

export type RegisterProviderInput = z.infer<typeof registerProviderSchema>;
export type PatchProviderInput = z.infer<typeof patchProviderSchema>;

/**
 * `POST /v1/admin/providers/sync`: one provider, or every active one without `provider_id`. An id
 * that is not a string is a 400, and so is any other field (a misspelt `providerId`): read as none,
 * either would widen the run to every provider.
 */
export const requestSyncSchema = z.object({ provider_id: z.string({ error: 'must be a provider id (a string)' }).min(1).optional() }).strict();

// What the API answers (the OpenAPI document is generated from these).
export const providerObjectSchema = z.object({
  id: z.string(),
  object: z.literal('provider'),
  name: z.string(),
  vendor: z.string(),
  category: z.enum(['llm', 'image']),
  active: z.boolean(),
  default_provider_image_edit: z.boolean(),
  default_provider_image_generate: z.boolean(),
  created_at: z.number().int(),
  updated_at: z.number().int(),
  // Administrators only:
  base_url: z.string().optional(),
  // `enabled`: the administrative switch; `healthy`: this process's live health (false in a cool-down).
  endpoints: z.array(z.object({ url: z.string(), enabled: z.boolean(), healthy: z.boolean(), priority: z.number().int(), weight: z.number().int() })).optional(),
  metadata: z.record(z.string(), z.string()).optional(),
  api_key_configured: z.boolean().optional(),
  last_synced_at: z.number().int().nullable().optional(),
  last_sync_error: z.string().nullable().optional(),
  model_count: z.number().int().optional(),
  model_active_count: z.number().int().optional(),
});
export const providerListSchema = z.object({ object: z.literal('list'), data: z.array(providerObjectSchema) });
export const registeredProviderSchema = providerObjectSchema.extend({ models: z.array(modelSummarySchema), sync_error: z.string().nullable() });
export const syncResultSchema = z.object({
  object: z.literal('provider.sync'),
  provider_id: z.string(),
  /** The recorded run (`GET /v1/admin/providers/sync/{id}`). */
  sync_id: z.string(),
  added: z.number().int(),
  updated: z.number().int(),
  deactivated: z.number().int(),
  models: z.array(modelSummarySchema),
});
export const syncRequestSchema = z.object({
  object: z.literal('provider.sync_request'),
  id: z.string(),
  provider_id: z.string().nullable(),
  status: z.literal('queued'),
});

/** `DELETE /v1/admin/providers/{id}?force=true` also removes enabled models. */
export const deleteProviderQuery = z.object({ force: z.enum(['true', 'false']).default('false').transform((v) => v === 'true') });
export const deletedProviderSchema = z.object({
  id: z.string(),
  object: z.literal('provider.deleted'),
  deleted: z.literal(true),
  models_removed: z.number().int(),
});

export const syncRunSchema = z.object({
  id: z.string(),
  object: z.literal('provider.sync_run'),
  provider_id: z.string().nullable(),
  status: z.enum(['queued', 'running', 'succeeded', 'failed']),
  providers_synced: z.number().int(),
  providers_failed: z.number().int(),
  added: z.number().int(),
  updated: z.number().int(),
  deactivated: z.number().int(),
  error: z.string().nullable(),
  failures: z.array(z.object({ provider_id: z.string(), error: z.string() })),
  created_at: z.number().int(),
  started_at: z.number().int().nullable(),
  finished_at: z.number().int().nullable(),
});
