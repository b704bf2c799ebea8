import { monitorEventLoopDelay } from 'node:perf_hooks';
import type { RequestHandler } from 'express';
import { Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import { joinMetricsGroup, metricsPage } from './metrics-group.js';
import { CounterFamily, HistogramFamily, type CounterCell, type HistogramCell } from './series.js';
import { whenClosed } from './request-objects.js';

/** Sampling interval of the event-loop delay monitor; the reported delay is the lateness beyond it. */
const LOOP_RESOLUTION_MS = 10;

/**
 * The one way a service (or the edge) gets its Prometheus registry: every series labelled with
 * `service`, plus the Node process series — heap and memory (`nodejs_heap_size_used_bytes`,
 * `process_resident_memory_bytes`), GC pauses (`nodejs_gc_duration_seconds{kind}`), CPU, handles,
 * and the event-loop delay (`nodejs_eventloop_delay_seconds{quantile}`, below). Pass an existing
 * registry to add them to it (a service that registers its domain series first).
 */
export function createMetricsRegistry(service: string, registry: Registry = new Registry()): Registry {
  registry.setDefaultLabels({ service });
  collectDefaultMetrics({ register: registry });
  eventLoopDelay(registry);
  joinMetricsGroup(service, registry);
  return registry;
}

/**
 * A read shared by the gauges one scrape fills from the same query. prom-client calls every
 * collect of a scrape in the same tick, so each gauge joins the read already in flight and they all
 * show one moment: two reads could straddle a change (a delivery completing, an event published)
 * and show, say, a lag beside nothing pending. The next scrape reads afresh.
 */
export function oneReadPerScrape<T>(read: () => Promise<T>): () => Promise<T> {
  let inFlight: Promise<T> | null = null;
  return () =>
    (inFlight ??= read().finally(() => {
      inFlight = null;
    }));
}

/**
 * A gauge of state read at scrape time (a backlog, a lag): each scrape awaits `read`, clears the
 * gauge and lets `show` set what was read. A read that fails (the database or the broker down)
 * leaves the gauge without a value in that scrape instead of failing the whole page, whose process
 * series matter most during such an outage; never the previous scrape's value, and never 0 (which
 * prom-client's `reset()` would leave on a gauge without labels, reading as "nothing pending").
 * Gauges fed by one query share its read through `oneReadPerScrape`.
 */
export function stateGauge<T, L extends string = string>(
  registry: Registry,
  options: { name: string; help: string; labelNames?: readonly L[]; read: () => Promise<T>; show: (gauge: Gauge<L>, value: T) => void },
): void {
  const failed = Symbol('failed');
  new Gauge<L>({
    name: options.name,
    help: options.help,
    labelNames: options.labelNames ?? [],
    registers: [registry],
    async collect() {
      const value = await options.read().catch(() => failed);
      (this as unknown as { hashMap: Record<string, unknown> }).hashMap = {};
      if (value !== failed) options.show(this, value as T);
    },
  });
}

/** Prometheus metrics per app: the process series, and request counts and latency histograms by route and status. */
export function createMetrics(service: string, options: { registry?: Registry } = {}) {
  // A service may pass its own registry to publish its domain series (e.g. per-tool counters) on the same /metrics.
  const registry = createMetricsRegistry(service, options.registry);
  const requests = new CounterFamily({
    name: 'http_requests_total',
    help: 'HTTP requests by method, route and status',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [registry],
  });
  const latency = new HistogramFamily({
    name: 'http_request_duration_seconds',
    help: 'HTTP request latency by method, route and status',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [registry],
  });

  // One pair of cells per (method, route, status), looked up by one string key per request.
  const series = new Map<string, { count: CounterCell; duration: HistogramCell }>();
  const seriesFor = (method: string, route: string, status: number) => {
    const key = `${method} ${status} ${route}`;
    let bound = series.get(key);
    if (!bound) {
      const labels = { method, route, status: String(status) };
      bound = { count: requests.series(labels), duration: latency.series(labels) };
      series.set(key, bound);
    }
    return bound;
  };

  const middleware: RequestHandler = (req, res, next) => {
    const started = process.hrtime.bigint();
    whenClosed(res, () => {
      // The matched path template keeps label cardinality bounded; unmatched paths share one label.
      const route = routeLabel(res.locals.routeTemplate, req.route?.path, req.baseUrl);
      const bound = seriesFor(req.method, route, res.statusCode);
      bound.count.inc();
      bound.duration.observe(Number(process.hrtime.bigint() - started) / 1e9);
    });
    next();
  };

  const endpoint: RequestHandler = async (_req, res, next) => {
    try {
      res.setHeader('Content-Type', registry.contentType);
      res.end(await metricsPage(service, registry));
    } catch (error) {
      next(error);
    }
  };

  return { registry, middleware, endpoint };
}

/**
 * A route table sets the template it matched (`/v1/projects/:projectId`, one series for the path and
 * its `/llm` alias). A router callback leaves Express's own route path, used only when it is a
 * string template: a regex or array would put raw patterns in the label.
 */
function routeLabel(template: unknown, expressPath: unknown, baseUrl: string): string {
  if (typeof template === 'string') return template;
  if (typeof expressPath === 'string') return `${baseUrl}${expressPath}`;
  return 'unmatched';
}

/**
 * `nodejs_eventloop_delay_seconds{quantile}`: how late the event loop ran a 10 ms timer since the
 * previous scrape (p50, p90, p99, max). One blocking call (synchronous I/O, a long parse, an
 * embedded database on the main thread) delays every request in flight by that much, so this is
 * the figure to watch for tail latency. The monitor runs on libuv's side and does not keep the
 * process alive.
 */
function eventLoopDelay(registry: Registry): void {
  const monitor = monitorEventLoopDelay({ resolution: LOOP_RESOLUTION_MS });
  monitor.enable();
  const late = (ns: number) => Math.max(0, ns / 1e6 - LOOP_RESOLUTION_MS) / 1000;
  new Gauge({
    name: 'nodejs_eventloop_delay_seconds',
    help: 'Event-loop delay since the previous scrape (lateness of a 10 ms timer), by quantile',
    labelNames: ['quantile'] as const,
    registers: [registry],
    collect() {
      for (const q of [0.5, 0.9, 0.99]) this.set({ quantile: String(q) }, late(monitor.percentile(q * 100)));
      this.set({ quantile: '1' }, late(monitor.max));
      monitor.reset();
    },
  });
}
