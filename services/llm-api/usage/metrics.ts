import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { UsageRecord } from './recorder.js';

/**
 * Domain metrics of the chat path, fed by each usage record as it is recorded: tokens and cost by
 * model and provider, and the upstream's latency and failures by provider endpoint. `provider` is the
 * provider id; requests that never reached a provider are counted under `provider="none"`.
 */
export function createUsageMetrics(registry: Registry, health?: { unhealthy(): string[] }) {
  const tokens = new Counter({ name: 'llm_tokens_total', help: 'Tokens the providers reported, by model, provider and kind (prompt, completion, reasoning)', labelNames: ['model', 'provider', 'kind'] as const, registers: [registry] });
  const cost = new Counter({ name: 'llm_cost_micro_usd_total', help: 'Cost of chat requests in micro-USD, by model and provider', labelNames: ['model', 'provider'] as const, registers: [registry] });
  const requests = new Counter({ name: 'llm_requests_total', help: 'Chat requests by model, provider and outcome (ok, upstream_error, client_closed, …)', labelNames: ['model', 'provider', 'outcome'] as const, registers: [registry] });
  const latency = new Histogram({
    name: 'llm_upstream_latency_seconds',
    help: 'Time from request arrival to the end of the answer, by provider endpoint and status',
    labelNames: ['provider', 'endpoint', 'status'] as const,
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
    registers: [registry],
  });
  const errors = new Counter({
    name: 'llm_upstream_errors_total',
    help: 'Chat requests that ended in an upstream failure, by provider endpoint and outcome',
    labelNames: ['provider', 'endpoint', 'outcome'] as const,
    registers: [registry],
  });
  if (health) {
    new Gauge({
      name: 'llm_upstream_endpoint_unhealthy',
      help: 'Provider endpoints this process has taken out of rotation (1 while cooling down), by endpoint origin',
      labelNames: ['endpoint'] as const,
      registers: [registry],
      collect() {
        this.reset();
        for (const url of health.unhealthy()) this.set({ endpoint: safeOrigin(url) }, 1);
      },
    });
  }
  return {
    observe(record: UsageRecord) {
      const provider = record.provider_id ?? 'none';
      tokens.inc({ model: record.model, provider, kind: 'prompt' }, record.prompt_tokens);
      tokens.inc({ model: record.model, provider, kind: 'completion' }, record.completion_tokens);
      tokens.inc({ model: record.model, provider, kind: 'reasoning' }, record.reasoning_tokens);
      cost.inc({ model: record.model, provider }, record.cost_micro_usd);
      requests.inc({ model: record.model, provider, outcome: record.outcome });
      // Endpoint URLs carry no secrets (keys travel in headers); the path is dropped to bound cardinality.
      const endpoint = record.endpoint ? safeOrigin(record.endpoint) : 'none';
      latency.observe({ provider, endpoint, status: String(record.status) }, record.latency_ms / 1000);
      if (UPSTREAM_FAILURES.has(record.outcome)) errors.inc({ provider, endpoint, outcome: record.outcome });
    },
  };
}

/** Outcomes that are the provider's failure (not the client's leaving or a refusal before dispatch). */
const UPSTREAM_FAILURES = new Set(['upstream_error', 'upstream_error_event', 'stream_error', 'deadline', 'event_too_large', 'rate_limited']);

function safeOrigin(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return 'invalid';
  }
}
