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

/** Cost from pricing lines: `per_1k_prompt_tokens`, `per_1k_completion_tokens`, `per_1m_*`, `per_request`. */
export function costMicroUsd(lines: PricingLine[], usage: { prompt: number; completion: number }): number {
  let total = 0;
  for (const line of lines) {
    const amount = Number(line.amount_micro_usd) || 0;
    switch (line.unit) {
      case 'per_1k_prompt_tokens':
        total += (amount * usage.prompt) / 1000;
        break;
      case 'per_1k_completion_tokens':
        total += (amount * usage.completion) / 1000;
        break;
      case 'per_1m_prompt_tokens':
        total += (amount * usage.prompt) / 1_000_000;
        break;
      case 'per_1m_completion_tokens':
        total += (amount * usage.completion) / 1_000_000;
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
  });
  return { record: writer.push, pending: writer.pending, flush: writer.flush, stop: writer.stop };
}

export type UsageRecorder = ReturnType<typeof createUsageRecorder>;
