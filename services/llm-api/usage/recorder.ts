import type { Knex } from 'knex';
import { createBatchWriter, type Logger } from '../../kit/index.js';
import type { PricingLine } from '../models/types.js';
import { insertUsageBatch } from './store.js';

/**
 * Usage accounting off the request path: `record()` only pushes to memory; a timer writes the
 * queue in batches (one multi-row insert). On failure the batch goes back to the front and is
 * retried on the next tick; `stop()` flushes everything that is left (called on shutdown).
 */
export interface UsageRecord {
  request_id: string;
  user_id: string | null;
  auth_method: string | null;
  api_key_id: string | null;
  model: string;
  provider_id: string | null;
  provider_model_id: string | null;
  endpoint: string | null;
  stream: boolean;
  prompt_tokens: number;
  /** Of the prompt tokens, those the provider served from its cache (at most the prompt count; absent: 0). */
  cached_tokens?: number;
  completion_tokens: number;
  reasoning_tokens: number;
  total_tokens: number;
  cost_micro_usd: number;
  /** The counts (and so the cost) are the gateway's estimate, not the provider's report (absent: false). */
  usage_estimated?: boolean;
  latency_ms: number;
  ttfb_ms: number | null;
  attempts: number;
  status: number;
  outcome: string;
  metadata: Record<string, unknown> | null;
  created_at: Date;
  /** The project the request was made for, when known (rollup dimension). */
  project_id?: string | null;
}

/**
 * Cost from pricing lines: `per_1k_prompt_tokens`, `per_1k_completion_tokens`,
 * `per_1k_cached_prompt_tokens`, their `per_1m_*` forms, and `per_request`. Cached prompt tokens
 * (the provider's `prompt_tokens_details.cached_tokens`, part of the prompt count) are charged at
 * the cached rate when the model has one, and the prompt lines then charge the rest of the prompt;
 * without a cached line every prompt token is charged at the prompt rate.
 */
export function costMicroUsd(lines: PricingLine[], usage: { prompt: number; completion: number; cached?: number }): number {
  const cachedPriced = usage.cached ? lines.some((line) => line.unit === 'per_1k_cached_prompt_tokens' || line.unit === 'per_1m_cached_prompt_tokens') : false;
  const cached = cachedPriced ? Math.min(usage.cached!, usage.prompt) : 0;
  const prompt = usage.prompt - cached;
  let total = 0;
  for (const line of lines) {
    const amount = Number(line.amount_micro_usd) || 0;
    switch (line.unit) {
      case 'per_1k_prompt_tokens':
        total += (amount * prompt) / 1000;
        break;
      case 'per_1k_completion_tokens':
        total += (amount * usage.completion) / 1000;
        break;
      case 'per_1k_cached_prompt_tokens':
        total += (amount * cached) / 1000;
        break;
      case 'per_1m_prompt_tokens':
        total += (amount * prompt) / 1_000_000;
        break;
      case 'per_1m_completion_tokens':
        total += (amount * usage.completion) / 1_000_000;
        break;
      case 'per_1m_cached_prompt_tokens':
        total += (amount * cached) / 1_000_000;
        break;
      case 'per_request':
        total += amount;
        break;
      default:
        break;
    }
  }
  return Math.round(total);
}

export function createUsageRecorder(deps: { knex: Knex; logger: Logger; flushMs: number; batchSize: number; maxQueued?: number }) {
  // Bounded memory when the database is down for long: the oldest records go first, counted.
  const writer = createBatchWriter<UsageRecord>({
    name: 'usage',
    write: (batch) => insertUsageBatch(deps.knex, batch),
    flushMs: deps.flushMs,
    batchSize: deps.batchSize,
    maxQueued: deps.maxQueued ?? 200_000,
    logger: deps.logger,
    // Customers are billed from these records: at shutdown, a database away for a restart or a
    // failover is waited for (within the 15 s the process's stop allows its flushes).
    stopRetryMs: 8_000,
  });
  return { record: writer.push, pending: writer.pending, flush: writer.flush, stop: writer.stop };
}

export type UsageRecorder = ReturnType<typeof createUsageRecorder>;
