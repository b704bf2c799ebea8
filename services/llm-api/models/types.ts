import type { CatalogRow, ProviderModelRow } from '../../../domains/catalog/index.js';
import { contextLengthOf, type ResolvedModel } from './registry.js';

/** How the API shows catalog rows (the rows themselves belong to domains/catalog). */
export type { CatalogRow, EndpointConfig, PricingLine, ProviderModelRow, ProviderRow } from '../../../domains/catalog/index.js';

/** SPEC.md 2.4 model summary. */
export function modelSummary(pm: ProviderModelRow) {
  return {
    id: pm.model_public_id,
    object: 'model',
    created: pm.created,
    owned_by: pm.owned_by,
    category: pm.category,
    model_display_name: pm.model_display_name,
    category_order_number: pm.category_order_number,
    model_order_number: pm.model_order_number,
  };
}

/**
 * A model as `GET /v1/models` and `GET /v1/models/{model}` show it: the summary, and the context
 * window requests to it are fitted to (what a client needs to size a history; null when unknown).
 */
export function modelEntry(model: ResolvedModel) {
  return { ...modelSummary(model.candidates[0]!.pm), context_length: contextLengthOf(model) };
}

/** SPEC.md 2.7 provider model. */
export function providerModelView(pm: ProviderModelRow) {
  return {
    id: pm.id,
    object: 'provider_model',
    model_catalog_id: pm.model_catalog_id,
    model_public_id: pm.model_public_id,
    provider_id: pm.provider_id,
    provider_original_model_id: pm.provider_original_model_id,
    provider_vendor: pm.provider_vendor,
    category: pm.category,
    family: pm.family,
    model_display_name: pm.model_display_name,
    instruct_model_public_id: pm.instruct_model_public_id,
    active: pm.active,
    supports_audio: pm.supports_audio,
    supports_embeddings: pm.supports_embeddings,
    supports_images: pm.supports_images,
    supports_instruct: pm.supports_instruct,
    supports_reasoning: pm.supports_reasoning,
    supports_video: pm.supports_video,
    category_order_number: pm.category_order_number,
    model_order_number: pm.model_order_number,
    pricing: pm.pricing,
    token_limits: pm.token_limits,
    created_at: pm.created_at,
    updated_at: pm.updated_at,
  };
}

/** SPEC.md 2.6 catalog entry. */
export function catalogView(c: CatalogRow) {
  return {
    id: c.id,
    object: 'model_catalog',
    public_id: c.public_id,
    model_display_name: c.model_display_name,
    description: c.description,
    family: c.family,
    notes: c.notes,
    requires_feature_flag: c.requires_feature_flag,
    status: c.status,
    active: c.active,
    experimental: c.experimental,
    is_moderated: c.is_moderated,
    supports_audio: c.supports_audio,
    supports_browser: c.supports_browser,
    supports_embeddings: c.supports_embeddings,
    supports_images: c.supports_images,
    supports_instruct: c.supports_instruct,
    supports_reasoning: c.supports_reasoning,
    supports_tools: c.supports_tools,
    supports_video: c.supports_video,
    context_length: c.context_length,
    tags: c.tags,
    extras: c.extras,
    architecture: c.architecture ?? { input_modalities: ['text'], output_modalities: ['text'], instruct_type: null, modality: 'text->text', tokenizer: null },
    supported_parameters: c.supported_parameters ?? { names: [], default: {} },
    manual_fields: c.manual_fields,
    created_at: c.created_at,
    updated_at: c.updated_at,
    last_synced_at: c.last_synced_at,
  };
}

