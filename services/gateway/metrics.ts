import { Counter, Gauge } from 'prom-client';
import { CounterFamily, HistogramFamily, createMetricsRegistry, type CounterCell, type HistogramCell } from '../kit/http/index.js';

/**
 * The embedded edge's Prometheus metrics (`GET /metrics`, like Kong's status listener): requests by
 * decK route and status, latency, connections refused by the per-address cap, and open connections
 * against the edge's bound on them. The route label is the decK route name (bounded), never the raw
 * path. The Node process series come with the kit's registry, as on every service.
 */
export function createEdgeMetrics() {
  const registry = createMetricsRegistry('gateway');
  const requests = new CounterFamily({ name: 'edge_requests_total', help: 'Requests through the edge by decK route and status', labelNames: ['route', 'status'] as const, registers: [registry] });
  const latency = new HistogramFamily({
    name: 'edge_request_duration_seconds',
    help: 'Time from request to the end of the answer, by decK route and status',
    labelNames: ['route', 'status'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120],
    registers: [registry],
  });
  const refusedConnections = new Counter({ name: 'edge_connections_refused_total', help: 'Connections closed at once by the per-address connection cap', registers: [registry] });
  const overCapacity = new Counter({ name: 'edge_connections_over_capacity_total', help: 'Connections beyond EDGE_MAX_CONNECTIONS, whose request was answered 503', registers: [registry] });
  // One pair of cells per (route, status), looked up by one string key per request.
  const series = new Map<string, { count: CounterCell; duration: HistogramCell }>();
  return {
    registry,
    observe(route: string | null, status: number, durationMs: number) {
      const key = `${status} ${route ?? ''}`;
      let bound = series.get(key);
      if (!bound) {
        const labels = { route: route ?? 'unmatched', status: String(status) };
        bound = { count: requests.series(labels), duration: latency.series(labels) };
        series.set(key, bound);
      }
      bound.count.inc();
      bound.duration.observe(durationMs / 1000);
    },
    connectionRefused: () => refusedConnections.inc(),
    connectionOverCapacity: () => overCapacity.inc(),
    /** Open connections and the bound on them (EDGE_MAX_CONNECTIONS), read at each scrape. */
    watchConnections(open: () => number, bound: number | undefined) {
      new Gauge({ name: 'edge_connections_open', help: 'Connections the edge holds open, from every address', registers: [registry], collect() { this.set(open()); } });
      if (bound !== undefined) new Gauge({ name: 'edge_connections_max', help: 'The bound on open connections (EDGE_MAX_CONNECTIONS); beyond it requests are answered 503', registers: [registry] }).set(bound);
    },
  };
}

export type EdgeMetrics = ReturnType<typeof createEdgeMetrics>;
