import { z } from 'zod';
import { catalogConfigShape } from '../../domains/catalog/index.js';
import { webhooksConfigShape } from '../../domains/webhooks/index.js';
import { bool, loadConfig } from '../kit/index.js';
import { chatConfigShape } from './chat/index.js';
import { conversationsConfigShape } from './conversations/index.js';
import { identityConfigShape } from './identity/index.js';
import { requestLogConfigShape } from './requests/index.js';

/**
 * llm-api's own settings (README.md "LLM API" table), parsed once in deps.ts from the environment
 * the platform was configured from. The catalog's and the webhooks' settings are shared with their
 * workers and declared in their domains; the chat path's and the conversations' next to their code.
 */
export const llmApiConfigShape = {
  LLM_UPSTREAM_HEADERS_TIMEOUT_MS: z.coerce.number().int().min(1).default(120000),
  LLM_UPSTREAM_BODY_TIMEOUT_MS: z.coerce.number().int().min(1).default(300000),
  LLM_UPSTREAM_CONNECTIONS: z.coerce.number().int().min(1).max(100000).default(2048),
  LLM_HEALTH_FAILURE_THRESHOLD: z.coerce.number().int().min(1).default(3),
  LLM_HEALTH_COOLDOWN_MS: z.coerce.number().int().min(0).default(30000),
  LLM_HEALTH_PROBE_INTERVAL_MS: z.coerce.number().int().min(0).default(10000),
  LLM_ROUTING_SEED: z.coerce.number().int().optional(),
  LLM_SSE_KEEPALIVE_MS: z.coerce.number().int().min(0).default(15000),
  LLM_CHAT_BODY_LIMIT: z.string().regex(/^\d+(b|kb|mb)$/i, 'a size such as 10mb').default('10mb'),
  LLM_USAGE_FLUSH_MS: z.coerce.number().int().min(1).default(1000),
  LLM_USAGE_BATCH_SIZE: z.coerce.number().int().min(1).max(10000).default(500),
  /** How long admission caches a key's and a user's budgets and allow-lists (0: read them per request). */
  LLM_SPEND_LIMITS_CACHE_MS: z.coerce.number().int().min(0).default(5000),
  /** Off: POST /llm/auth/guest-login answers 403 (e.g. in front of paid providers). */
  GUEST_LOGIN_ENABLED: bool(true),
  /** Comma-separated model ids or patterns guests may use; empty = every model. */
  GUEST_ALLOWED_MODELS: z
    .string()
    .default('')
    .transform((v) => v.split(',').map((s) => s.trim()).filter(Boolean)),
  ...identityConfigShape,
  ...catalogConfigShape,
  ...chatConfigShape,
  ...conversationsConfigShape,
  ...webhooksConfigShape,
  ...requestLogConfigShape,
};

export type LlmApiConfig = z.infer<z.ZodObject<typeof llmApiConfigShape>>;

export const loadLlmApiConfig = (env: NodeJS.ProcessEnv | Readonly<NodeJS.ProcessEnv>): LlmApiConfig =>
  loadConfig(llmApiConfigShape, env as NodeJS.ProcessEnv);
