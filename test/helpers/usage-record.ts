import type { UsageRecord } from '../../services/llm-api/usage/recorder.js';

/** A usage record as the chat path queues it (a small, successful non-stream request), with `over` applied. */
export const usageRecord = (over: Partial<UsageRecord> = {}): UsageRecord => ({
  request_id: 'req',
  user_id: 'user_a',
  auth_method: 'apikey',
  api_key_id: null,
  model: 'm',
  provider_id: 'prov_1',
  provider_model_id: 'pm_1',
  endpoint: null,
  stream: false,
  prompt_tokens: 10,
  completion_tokens: 5,
  reasoning_tokens: 0,
  total_tokens: 15,
  cost_micro_usd: 100,
  latency_ms: 1,
  ttfb_ms: 1,
  attempts: 1,
  status: 200,
  outcome: 'ok',
  metadata: null,
  created_at: new Date('2026-11-20T12:00:00Z'),
  project_id: null,
  ...over,
});
