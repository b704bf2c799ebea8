/** Rows of the provider and model tables, as the stores return them (jsonb parsed, bigints as numbers). */

export interface EndpointConfig {
  url: string;
  priority: number;
  weight: number;
  /** Administrative switch: false takes the endpoint out of rotation. Runtime health is separate. */
  healthy: boolean;
}

export interface ProviderRow {
  id: string;
  name: string;
  vendor: string;
  category: 'llm' | 'image';
  base_url: string;
  api_key_sealed: string | null;
  api_key_hint: string | null;
  active: boolean;
  default_provider_image_edit: boolean;
  default_provider_image_generate: boolean;
  endpoints: EndpointConfig[];
  metadata: Record<string, string>;
  last_synced_at: number | null;
  last_sync_error: string | null;
  created_at: number;
  updated_at: number;
  seq: number;
}

export const CATALOG_FLAGS = ['audio', 'browser', 'embeddings', 'images', 'instruct', 'reasoning', 'tools', 'video'] as const;
export const PROVIDER_MODEL_FLAGS = ['audio', 'embeddings', 'images', 'instruct', 'reasoning', 'video'] as const;

export interface CatalogRow {
  id: string;
  public_id: string;
  model_display_name: string;
  description: string | null;
  family: string | null;
  notes: string | null;
  requires_feature_flag: string | null;
  status: string;
  active: boolean;
  experimental: boolean;
  is_moderated: boolean;
  supports_audio: boolean;
  supports_browser: boolean;
  supports_embeddings: boolean;
  supports_images: boolean;
  supports_instruct: boolean;
  supports_reasoning: boolean;
  supports_tools: boolean;
  supports_video: boolean;
  context_length: number | null;
  tags: string[];
  extras: Record<string, unknown>;
  architecture: Record<string, unknown> | null;
  supported_parameters: Record<string, unknown> | null;
  manual_fields: string[];
  last_synced_at: number | null;
  created_at: number;
  updated_at: number;
}

export interface PricingLine {
  amount_micro_usd: number;
  currency: string;
  unit: string;
}

export interface ProviderModelRow {
  id: string;
  provider_id: string;
  model_catalog_id: string;
  model_public_id: string;
  provider_original_model_id: string;
  provider_vendor: string;
  category: string;
  family: string | null;
  model_display_name: string;
  instruct_model_public_id: string | null;
  owned_by: string;
  created: number;
  active: boolean;
  sync_deactivated: boolean;
  supports_audio: boolean;
  supports_embeddings: boolean;
  supports_images: boolean;
  supports_instruct: boolean;
  supports_reasoning: boolean;
  supports_video: boolean;
  category_order_number: number;
  model_order_number: number;
  pricing: { lines: PricingLine[] };
  token_limits: { context_length?: number; max_completion_tokens?: number };
  manual_fields: string[];
  created_at: number;
  updated_at: number;
}

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

/** Capabilities named in model.added events. */
export function capabilitiesOf(row: Pick<CatalogRow, `supports_${(typeof CATALOG_FLAGS)[number]}`> | Partial<Record<string, unknown>>): string[] {
  const out = ['chat'];
  for (const f of CATALOG_FLAGS) if ((row as Record<string, unknown>)[`supports_${f}`]) out.push(f);
  return out;
}
