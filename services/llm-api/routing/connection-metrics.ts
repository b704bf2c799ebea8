import { Gauge, type Registry } from 'prom-client';
import type { Agent, Dispatcher } from 'undici';
import { CounterFamily } from '../../kit/http/index.js';
import { connectionProtocol } from './free-list-pool.js';

/**
 * Provider connections, by endpoint origin and the protocol each speaks (`h2`, `http/1.1`): opened
 * since start, and open now. What `LLM_UPSTREAM_HTTP_VERSION=auto` negotiated with each provider,
 * and how many sockets the providers hold (each an open file: docs/operations.md, "Open files and
 * held streams"). Counted from the pool's connect and disconnect events: a connection's first
 * disconnect ends it (undici reports an HTTP/2 connection closed by GOAWAY twice).
 */
export function registerProviderConnectionMetrics(registry: Registry, agent: Agent): void {
  const opened = new CounterFamily({
    name: 'llm_upstream_connections_opened_total',
    help: 'Provider connections opened, by endpoint origin and protocol (h2, http/1.1)',
    labelNames: ['endpoint', 'protocol'] as const,
    registers: [registry],
  });
  const open = new Gauge({
    name: 'llm_upstream_connections',
    help: 'Provider connections open now, by endpoint origin and protocol (h2, http/1.1)',
    labelNames: ['endpoint', 'protocol'] as const,
    registers: [registry],
  });
  const live = new Map<Dispatcher, { endpoint: string; protocol: string }>();
  agent.on('connect', (origin, targets) => {
    const connection = targets.at(-1)!;
    const labels = { endpoint: origin.origin, protocol: connectionProtocol(connection) };
    opened.series(labels).inc();
    open.inc(labels);
    live.set(connection, labels);
  });
  agent.on('disconnect', (_origin, targets) => {
    const connection = targets.at(-1)!;
    const labels = live.get(connection);
    if (!labels) return;
    live.delete(connection);
    open.dec(labels);
  });
}
