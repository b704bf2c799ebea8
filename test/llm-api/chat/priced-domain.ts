import { ManualClock, type Principal } from '../../../services/kit/index.js';
import type { ChatDeps } from '../../../services/llm-api/chat/completions.js';
import { defaultChatLimits } from '../../../services/llm-api/chat/config.js';
import type { ChatDispatcher } from '../../../services/llm-api/chat/dispatch.js';
import { createUsageMeters } from '../../../services/llm-api/usage/meter.js';
import type { UsageRecord } from '../../../services/llm-api/usage/recorder.js';

// The chat domain function (`completeChat`) around a hand-fed dispatcher: one model `m` served by a
// priced provider model (1 000 µUSD per 1k prompt tokens, 100 000 per 1k completion tokens), a
// usage meter that keeps its records and a budget ticket that keeps what it is charged.

export const principal: Principal = { userId: 'user_1', subject: 'user_1', email: null, username: null, authMethod: 'apikey', apiKeyId: 'key_1', isAdmin: false, isGuest: false };
const PRICING = [
  { unit: 'per_1k_prompt_tokens', amount_micro_usd: 1000 },
  { unit: 'per_1k_completion_tokens', amount_micro_usd: 100_000 },
];
const candidate = {
  pm: { id: 'pmdl_1', provider_id: 'prov_1', provider_original_model_id: 'up-model', model_public_id: 'm', pricing: { lines: PRICING }, supports_reasoning: false },
  provider: { row: { id: 'prov_1', name: 'P' }, apiKey: null, endpoints: [{ url: 'http://p/v1', priority: 0, weight: 1, healthy: true }] },
};
const model = { publicId: 'm', catalog: { supports_reasoning: false }, candidates: [candidate] };
/** The one attempt the dispatcher plans. */
export const attempt = { candidate, endpoint: candidate.provider.endpoints[0]! } as never;

export function pricedChatDeps(dispatcher: ChatDispatcher) {
  const records: UsageRecord[] = [];
  const settled: Array<{ cost: number; tokens: number }> = [];
  const clock = new ManualClock(1_700_000_000_000);
  const deps: ChatDeps = {
    registry: { resolve: (id) => (id === 'm' ? (model as never) : undefined) },
    dispatcher,
    usage: createUsageMeters({ recorder: { record: (r) => void records.push(r) }, clock }),
    admission: { admit: () => ({ settle: async (spent) => void settled.push(spent) }) },
    clock,
    limits: defaultChatLimits,
    messageSteps: [],
    logger: { error() {} },
  };
  return { deps, records, settled };
}
