import { Gauge, type Registry } from 'prom-client';
import { CounterFamily, HistogramFamily, type CounterCell, type HistogramCell } from '../../kit/http/index.js';
import type { UsageRecord } from './recorder.js';

/**
 * Domain metrics of the chat path, fed by each usage record as it is recorded: tokens and cost by
 * model and provider, and the upstream's latency and failures by provider endpoint. `provider` is the
 * provider id; requests that never reached a provider are counted under `provider="none"`.
 */
export function createUsageMetrics(registry: Registry, health?: { unhealthy(): string[] }) {
  const tokens = new CounterFamily({ name: 'llm_tokens_total', help: 'Tokens the providers reported (estimated for an answer without a report), by model, provider and kind (prompt, completion, reasoning)', labelNames: ['model', 'provider', 'kind'] as const, registers: [registry] });
  const cost = new CounterFamily({ name: 'llm_cost_micro_usd_total', help: 'Cost of chat requests in micro-USD, by model and provider', labelNames: ['model', 'provider'] as const, registers: [registry] });
  const requests = new CounterFamily({ name: 'llm_requests_total', help: 'Chat requests by model, provider and outcome (ok, upstream_error, client_closed, …)', labelNames: ['model', 'provider', 'outcome'] as const, registers: [registry] });
  const latency = new HistogramFamily({
    name: 'llm_upstream_latency_seconds',
    help: 'Time from request arrival to the end of the answer, by provider endpoint and status',
    labelNames: ['provider', 'endpoint', 'status'] as const,
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
    registers: [registry],
  });
  const errors = new CounterFamily({
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
  // One set of cells per (model, provider, outcome, endpoint, status), made on first use and found
  // by one string key per request: seven updates a request, each plain arithmetic (kit/http/series).
  interface Bound {
    prompt: CounterCell;
    completion: CounterCell;
    reasoning: CounterCell;
    cost: CounterCell;
    requests: CounterCell;
    latency: HistogramCell;
    errors: CounterCell | null;
  }
  const series = new Map<string, Bound>();
  const origins = new Map<string, string>();
  const originOf = (url: string | null) => {
    if (!url) return 'none';
    let origin = origins.get(url);
    if (origin === undefined) {
      // Endpoint URLs carry no secrets (keys travel in headers); the path is dropped to bound cardinality.
      origin = safeOrigin(url);
      if (origins.size >= 1024) origins.clear();
      origins.set(url, origin);
    }
    return origin;
  };
  const seriesFor = (model: string, provider: string, outcome: string, endpoint: string, status: number): Bound => {
    const key = `${model}\n${provider}\n${outcome}\n${endpoint}\n${status}`;
    let bound = series.get(key);
    if (!bound) {
      bound = {
        prompt: tokens.series({ model, provider, kind: 'prompt' }),
        completion: tokens.series({ model, provider, kind: 'completion' }),
        reasoning: tokens.series({ model, provider, kind: 'reasoning' }),
        cost: cost.series({ model, provider }),
        requests: requests.series({ model, provider, outcome }),
        latency: latency.series({ provider, endpoint, status: String(status) }),
        errors: UPSTREAM_FAILURES.has(outcome) ? errors.series({ provider, endpoint, outcome }) : null,
      };
      series.set(key, bound);
    }
    return bound;
  };
  return {
    observe(record: UsageRecord) {
      const bound = seriesFor(record.model, record.provider_id ?? 'none', record.outcome, originOf(record.endpoint), record.status);
      bound.prompt.inc(record.prompt_tokens);
      bound.completion.inc(record.completion_tokens);
      bound.reasoning.inc(record.reasoning_tokens);
      bound.cost.inc(record.cost_micro_usd);
      bound.requests.inc();
      bound.latency.observe(record.latency_ms / 1000);
      bound.errors?.inc();
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
