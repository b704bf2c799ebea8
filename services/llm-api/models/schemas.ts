import { z } from 'zod';

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
    context_length: z.number().min(0).max(1e9).optional(),
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

export const pricingSchema = z
  .object({
    lines: z
      .array(
        z
          .object({
            amount_micro_usd: z.number().int().min(0),
            currency: z.string().min(1).max(8).default('USD'),
            unit: z.enum(['per_1k_prompt_tokens', 'per_1k_completion_tokens', 'per_1m_prompt_tokens', 'per_1m_completion_tokens', 'per_request']),
          })
          .strict(),
      )
      .max(32),
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
      .object({ context_length: z.number().int().min(0).optional(), max_completion_tokens: z.number().int().min(0).optional() })
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
