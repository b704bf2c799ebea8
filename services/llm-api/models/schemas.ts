import { z } from 'zod';
import { CATALOG_FLAGS, PROVIDER_MODEL_FLAGS } from '../../../domains/catalog/index.js';
import { pageQuery } from '../../kit/index.js';

const flag = z.boolean().optional();

export const patchCatalogSchema = z
  .object({
    active: flag,
    architecture: z
      .object({
        input_modalities: z.array(z.string().max(64)).max(32).optional(),
        output_modalities: z.array(z.string().max(64)).max(32).optional(),
        instruct_type: z.string().max(120).nullable().optional(),
        modality: z.string().max(120).nullable().optional(),
        tokenizer: z.string().max(120).nullable().optional(),
      })
      .strict()
      .optional(),
    // A whole number of tokens, at least 1: 0 would drop every conversation's history (registry.ts contextLengthOf).
    context_length: z.number().int().min(1).max(1e9).optional(),
    description: z.string().max(10_000).optional(),
    experimental: flag,
    extras: z.record(z.string(), z.unknown()).optional(),
    family: z.string().max(120).optional(),
    is_moderated: flag,
    model_display_name: z.string().trim().min(1).max(300).optional(),
    notes: z.string().max(10_000).optional(),
    requires_feature_flag: z.string().max(120).optional(),
    supported_parameters: z
      .object({ names: z.array(z.string().max(120)).max(200).default([]), default: z.record(z.string(), z.number()).default({}) })
      .strict()
      .optional(),
    supports_audio: flag,
    supports_browser: flag,
    supports_embeddings: flag,
    supports_images: flag,
    supports_instruct: flag,
    supports_reasoning: flag,
    supports_tools: flag,
    supports_video: flag,
    tags: z.array(z.string().max(64)).max(64).optional(),
  })
  .strict();

/** What each pricing unit charges for (see costMicroUsd). */
const PRICED_BY_UNIT: Record<string, string> = {
  per_1k_prompt_tokens: 'prompt tokens',
  per_1m_prompt_tokens: 'prompt tokens',
  per_1k_completion_tokens: 'completion tokens',
  per_1m_completion_tokens: 'completion tokens',
  per_1k_cached_prompt_tokens: 'cached prompt tokens',
  per_1m_cached_prompt_tokens: 'cached prompt tokens',
  per_request: 'requests',
};

export const pricingSchema = z
  .object({
    lines: z
      .array(
        z
          .object({
            amount_micro_usd: z.number().int().min(0),
            // Amounts are micro-USD and cost is added up, reported and budgeted in USD: a line in any
            // other currency would be charged as if it were USD, so it is refused (no conversion here).
            currency: z.literal('USD', { error: 'only USD is supported: amounts are micro-USD and cost is reported and budgeted in USD' }).default('USD'),
            unit: z.enum(['per_1k_prompt_tokens', 'per_1k_completion_tokens', 'per_1k_cached_prompt_tokens', 'per_1m_prompt_tokens', 'per_1m_completion_tokens', 'per_1m_cached_prompt_tokens', 'per_request']),
          })
          .strict(),
      )
      .max(32)
      .superRefine((lines, ctx) => {
        // Cost adds every line up: two lines pricing the same thing would charge it twice.
        const seen = new Map<string, number>();
        lines.forEach((line, i) => {
          const priced = PRICED_BY_UNIT[line.unit];
          const first = seen.get(priced);
          if (first === undefined) seen.set(priced, i);
          else ctx.addIssue({ code: 'custom', path: [i, 'unit'], message: `${priced} are already priced by lines[${first}]` });
        });
      }),
  })
  .strict();

export const patchProviderModelSchema = z
  .object({
    active: flag,
    category: z.string().min(1).max(32).optional(),
    category_order_number: z.number().int().min(-1_000_000).max(1_000_000).optional(),
    family: z.string().max(120).nullable().optional(),
    instruct_model_public_id: z.string().min(1).max(300).nullable().optional(),
    model_display_name: z.string().trim().min(1).max(300).optional(),
    model_order_number: z.number().int().min(-1_000_000).max(1_000_000).optional(),
    pricing: pricingSchema.optional(),
    supports_audio: flag,
    supports_embeddings: flag,
    supports_images: flag,
    supports_reasoning: flag,
    supports_video: flag,
    token_limits: z
      .object({ context_length: z.number().int().min(1).optional(), max_completion_tokens: z.number().int().min(1).optional() })
      .strict()
      .optional(),
  })
  .strict();

export const bulkToggleSchema = z
  .object({
    enable: z.boolean(),
    except_models: z.array(z.string().min(1).max(300)).max(1000).default([]),
    provider_id: z.string().min(1).max(64).optional(),
  })
  .strict();

export const catalogBulkToggleSchema = z
  .object({
    enable: z.boolean(),
    catalog_ids: z.array(z.string().min(1).max(300)).max(1000).default([]),
    except_models: z.array(z.string().min(1).max(300)).max(1000).default([]),
  })
  .strict();

export type PatchCatalogInput = z.infer<typeof patchCatalogSchema>;
export type PatchProviderModelInput = z.infer<typeof patchProviderModelSchema>;

/**
 * `GET /v1/admin/models/provider-models`: one provider's models, or all (an empty id counts as
 * none). Given twice it is a 400: read as none, it would widen the list to every provider.
 */
export const providerModelsQuery = pageQuery().extend({
  provider_id: z
    .string({ error: 'must be given once' })
    .optional()
    .transform((v) => v || undefined),
});

// What the API answers (the OpenAPI document is generated from these).
/** A model as every listing shows it; a provider's registration and sync answers list these too. */
export const modelSummarySchema = z.object({
  id: z.string(),
  object: z.literal('model'),
  created: z.number().int(),
  owned_by: z.string(),
  category: z.string(),
  model_display_name: z.string(),
  category_order_number: z.number().int(),
  model_order_number: z.number().int(),
});
/** `GET /v1/models` and `/v1/models/{model}`: with the context window; with `X-Provider-Data: true`, also which provider serves the model. */
export const modelEntrySchema = modelSummarySchema.extend({
  context_length: z.number().nullable(),
  provider_id: z.string().optional(),
  provider_name: z.string().optional(),
  provider_vendor: z.string().optional(),
});
export const modelListSchema = z.object({ object: z.literal('list'), data: z.array(modelEntrySchema) });

const flags = (names: readonly string[]) => Object.fromEntries(names.map((f) => [`supports_${f}`, z.boolean()]));
export const catalogObjectSchema = z.object({
  id: z.string(),
  object: z.literal('model_catalog'),
  public_id: z.string(),
  model_display_name: z.string(),
  description: z.string().nullable(),
  family: z.string().nullable(),
  notes: z.string().nullable(),
  requires_feature_flag: z.string().nullable(),
  status: z.string(),
  active: z.boolean(),
  experimental: z.boolean(),
  is_moderated: z.boolean(),
  ...flags(CATALOG_FLAGS),
  context_length: z.number().nullable(),
  tags: z.array(z.string()),
  extras: z.record(z.string(), z.unknown()),
  architecture: z.record(z.string(), z.unknown()),
  supported_parameters: z.record(z.string(), z.unknown()),
  manual_fields: z.array(z.string()),
  created_at: z.number().int(),
  updated_at: z.number().int(),
  last_synced_at: z.number().int().nullable(),
});
export const providerModelObjectSchema = z.object({
  id: z.string(),
  object: z.literal('provider_model'),
  model_catalog_id: z.string(),
  model_public_id: z.string(),
  provider_id: z.string(),
  provider_original_model_id: z.string(),
  provider_vendor: z.string(),
  category: z.string(),
  family: z.string().nullable(),
  model_display_name: z.string(),
  instruct_model_public_id: z.string().nullable(),
  active: z.boolean(),
  ...flags(PROVIDER_MODEL_FLAGS),
  category_order_number: z.number().int(),
  model_order_number: z.number().int(),
  pricing: pricingSchema,
  token_limits: z.object({ context_length: z.number().int().optional(), max_completion_tokens: z.number().int().optional() }),
  created_at: z.number().int(),
  updated_at: z.number().int(),
});
export const bulkResultSchema = z.object({
  updated_count: z.number().int(),
  failed_count: z.number().int(),
  skipped_count: z.number().int(),
  total_checked: z.number().int(),
  failed_models: z.array(z.string()),
});
