import type { Knex } from 'knex';
import type { Logger } from '../../kit/index.js';
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
  latency_ms: number;
  ttfb_ms: number | null;
  attempts: number;
  status: number;
  outcome: string;
  metadata: Record<string, unknown> | null;
  created_at: Date;
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
  const queue: UsageRecord[] = [];
  const maxQueued = deps.maxQueued ?? 200_000;
  let timer: NodeJS.Timeout | undefined;
  let flushing: Promise<void> = Promise.resolve();
  let dropped = 0;

  async function writeBatch(): Promise<boolean> {
    if (queue.length === 0) return false;
    const batch = queue.splice(0, deps.batchSize);
    try {
      await insertUsageBatch(deps.knex, batch);
      return true;
    } catch (error) {
      queue.unshift(...batch);
      deps.logger.warn({ err: (error as Error).message, queued: queue.length }, 'usage batch not written; will retry');
      return false;
    }
  }

  function flush(): Promise<void> {
    flushing = flushing.then(async () => {
      while (queue.length > 0 && (await writeBatch()));
    });
    return flushing;
  }

  function schedule() {
    timer = setTimeout(() => void flush().finally(() => timer && schedule()), deps.flushMs);
    timer.unref();
  }
  schedule();

  return {
    record(entry: UsageRecord) {
      if (queue.length >= maxQueued) {
        // Bounded memory when the database is down for long: the oldest records go first, counted.
        queue.shift();
        if (++dropped % 1000 === 1) deps.logger.error({ dropped }, 'usage queue full; dropping oldest records');
      }
      queue.push(entry);
      if (queue.length >= deps.batchSize) void flush();
    },
    pending: () => queue.length,
    flush,
    async stop() {
      clearTimeout(timer);
      timer = undefined;
      await flush();
      // A last attempt for records a failing batch put back.
      for (let i = 0; i < 3 && queue.length > 0; i++) await flush();
      if (queue.length > 0) deps.logger.error({ lost: queue.length }, 'usage records could not be written at shutdown');
    },
  };
}

export type UsageRecorder = ReturnType<typeof createUsageRecorder>;
