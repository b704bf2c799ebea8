import type { ServedRequest } from '../../services/kit/index.js';
import type { UsageRecord } from '../../services/llm-api/usage/recorder.js';

// Rows as a busy platform writes them: a few users and keys, one model, ids that never repeat.
let sequence = 0;
const requestId = () => `req_${(sequence++).toString(36).padStart(8, '0')}${Math.random().toString(36).slice(2, 14)}`;
export function servedRequest(): ServedRequest {
  return {
    request_id: requestId(),
    method: 'POST',
    path: '/v1/chat/completions',
    route: '/v1/chat/completions',
    status: 200,
    duration_ms: Math.round(Math.random() * 3000) / 100,
    aborted: false,
    user_id: `usr_${sequence % 7}`,
    auth_method: 'api_key',
    api_key_id: `key_${sequence % 5}`,
    usage: { model: 'gpt-4o-mini', provider: 'prov_1', prompt_tokens: 12, completion_tokens: 34, total_tokens: 46 },
    ended_at: new Date(),
  };
}
export function usageRecord(): UsageRecord {
  return {
    request_id: requestId(),
    user_id: `usr_${sequence % 7}`,
    auth_method: 'api_key',
    api_key_id: `key_${sequence % 5}`,
    model: 'gpt-4o-mini',
    provider_id: 'prov_1',
    provider_model_id: 'pm_1',
    endpoint: 'chat.completions',
    stream: sequence % 2 === 0,
    prompt_tokens: 12,
    completion_tokens: 34,
    reasoning_tokens: 0,
    total_tokens: 46,
    cost_micro_usd: 21,
    latency_ms: 20,
    ttfb_ms: 20,
    attempts: 1,
    status: 200,
    outcome: 'ok',
    metadata: null,
    created_at: new Date(),
    project_id: null,
  };
}

