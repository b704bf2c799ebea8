import cluster, { type Worker } from 'node:cluster';
import { AggregatorRegistry, type MetricObjectWithValues, type MetricValue, type Registry } from 'prom-client';

/**
 * Metrics of a platform that runs as several copies behind the same ports (`PLATFORM_PROCESSES`):
 * a scrape of `/metrics` reaches whichever copy the cluster hands the connection to, so that copy
 * answers for all of them. It asks the supervising process, which collects the service's series
 * from every copy over the cluster's IPC channel and returns one page, each series labelled with
 * its copy's `pid` (counters stay per process, so `rate()` never sees one copy's count replace
 * another's; `sum without (pid)` gives the platform's). Outside such a group a page is the
 * process's own registry, as before.
 */

type GroupMessage =
  | { group: 'metrics'; id: number; service: string }
  | { group: 'collect'; id: number; service: string }
  | { group: 'collected'; id: number; metrics: MetricObjectWithValues<MetricValue<string>>[] | null }
  | { group: 'page'; id: number; text: string | null };
const isGroupMessage = (m: unknown): m is GroupMessage => typeof m === 'object' && m !== null && 'group' in m;

/** How long a page waits for the copies; a copy that does not answer in time is left out of it. */
const COLLECT_TIMEOUT_MS = 2000;

const registries = new Map<string, Registry>();
const pendingPages = new Map<number, (text: string | null) => void>();
let nextId = 0;
let listening = false;

/** In a copy: the service's registry, for the supervisor's collection. Elsewhere: nothing. */
export function joinMetricsGroup(service: string, registry: Registry): void {
  if (!cluster.isWorker) return;
  registries.set(service, registry);
  if (listening) return;
  listening = true;
  process.on('message', (message: unknown) => {
    if (!isGroupMessage(message)) return;
    if (message.group === 'page') pendingPages.get(message.id)?.(message.text);
    else if (message.group === 'collect') void collect(message.id, message.service);
  });
}

/**
 * Answers the supervisor with this copy's series; `null` when there are none or reading them failed
 * (a series whose read throws, say with the database down). That copy is then left out of the page,
 * as when it does not answer: a scrape must never take a copy down.
 */
async function collect(id: number, service: string): Promise<void> {
  const registry = registries.get(service);
  let metrics: MetricObjectWithValues<MetricValue<string>>[] | null = null;
  if (registry) metrics = await ownSeries(registry).catch(() => null);
  if (process.connected) process.send?.({ group: 'collected', id, metrics } satisfies GroupMessage);
}

/** The registry's series, each labelled with this copy's pid. */
async function ownSeries(registry: Registry): Promise<MetricObjectWithValues<MetricValue<string>>[]> {
  const metrics = (await registry.getMetricsAsJSON()) as MetricObjectWithValues<MetricValue<string>>[];
  const pid = String(process.pid);
  for (const metric of metrics) {
    // Every copy's series stay apart (their labels differ by pid), so merging them is a union.
    (metric as { aggregator?: string }).aggregator = 'sum';
    for (const value of metric.values) value.labels = { ...value.labels, pid };
  }
  return metrics;
}

/** The `/metrics` page of `service`: the whole group's when this process is a copy in one. */
export async function metricsPage(service: string, registry: Registry): Promise<string> {
  if (!cluster.isWorker || !process.connected || !registries.has(service)) return registry.metrics();
  const id = nextId++;
  const text = await new Promise<string | null>((resolve) => {
    const timer = setTimeout(() => resolve(null), COLLECT_TIMEOUT_MS * 2);
    pendingPages.set(id, (page) => {
      clearTimeout(timer);
      resolve(page);
    });
    process.send?.({ group: 'metrics', id, service } satisfies GroupMessage);
  });
  pendingPages.delete(id);
  // No page from the supervisor (it is stopping, or merging failed): this copy's own page rather than none.
  return text ?? registry.metrics();
}

/**
 * In the supervisor: answers the copies' page requests by collecting from every live copy.
 * `copies()` is read per request, so replaced copies count and stopped ones do not.
 */
export function serveMetricsGroup(copies: () => Iterable<Worker>): void {
  let collectId = 0;
  const waiting = new Map<number, (metrics: GroupMessage & { group: 'collected' }) => void>();
  cluster.on('message', (worker, message: unknown) => {
    if (!isGroupMessage(message)) return;
    if (message.group === 'collected') {
      waiting.get(message.id)?.(message);
      return;
    }
    if (message.group !== 'metrics') return;
    const from = worker;
    const asks = [...copies()]
      .filter((w) => w.isConnected())
      .map(
        (copy) =>
          new Promise<MetricObjectWithValues<MetricValue<string>>[] | null>((resolve) => {
            const id = collectId++;
            const timer = setTimeout(() => {
              waiting.delete(id);
              resolve(null);
            }, COLLECT_TIMEOUT_MS);
            waiting.set(id, (reply) => {
              clearTimeout(timer);
              waiting.delete(id);
              resolve(reply.metrics);
            });
            copy.send({ group: 'collect', id, service: message.service } satisfies GroupMessage);
          }),
      );
    // A page that cannot be merged is answered with none (the copy then serves its own): never a
    // rejection left unhandled, which would end the supervisor and every copy with it.
    void Promise.all(asks)
      .then(async (all) => AggregatorRegistry.aggregate(all.filter((m) => m !== null)).metrics())
      .catch(() => null)
      .then((text) => {
        if (from.isConnected()) from.send({ group: 'page', id: message.id, text } satisfies GroupMessage);
      });
  });
}
