import type { Metric, Registry } from 'prom-client';

/**
 * Counters and histograms for series updated on every request. prom-client validates the label
 * object and rebuilds its hash key on every `inc` / `observe`, also through a child from
 * `labels(…)` (the child binds the object, not its key): about 2 % of a chat request's CPU across
 * the eleven updates a request makes. Here a label set is resolved once to a cell of plain numbers
 * (`series(labels)`, kept by the caller), an update is arithmetic on it, and the registry gets the
 * same exposition as prom-client's own Counter and Histogram when it is scraped: the same names,
 * help, types, label order and values.
 */
type Labels<N extends string> = Readonly<Record<N, string>>;

interface Exposed {
  labels: Record<string, string | number>;
  sharedLabels?: Record<string, string>;
  value: number;
  metricName?: string;
  exemplar?: null;
}

abstract class Family<N extends string, Cell> {
  readonly aggregator = 'sum';
  private readonly cells = new Map<string, { labels: Labels<N>; cell: Cell }>();

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly labelNames: readonly N[],
    registers: Registry[],
  ) {
    for (const registry of registers) registry.registerMetric(this as unknown as Metric);
  }

  /** The cell of one label set, made on first use; callers keep it instead of asking again. */
  series(labels: Labels<N>): Cell {
    let key = '';
    for (const name of this.labelNames) key += `${labels[name]}\u0000`;
    let entry = this.cells.get(key);
    if (!entry) {
      const own = {} as Record<N, string>;
      for (const name of this.labelNames) own[name] = String(labels[name]);
      entry = { labels: own, cell: this.newCell() };
      this.cells.set(key, entry);
    }
    return entry.cell;
  }

  protected abstract newCell(): Cell;
  protected abstract expose(labels: Labels<N>, cell: Cell, into: Exposed[]): void;
  protected abstract clear(cell: Cell): void;

  /** What prom-client's registry reads when it renders /metrics. */
  getForPromString(): { name: string; help: string; type: string; values: Exposed[]; aggregator: string } {
    const values: Exposed[] = [];
    for (const { labels, cell } of this.cells.values()) this.expose(labels, cell, values);
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }

  /** The JSON form (`registry.getMetricsAsJSON`): shared labels folded into each value's own, as prom-client does. */
  get(): { name: string; help: string; type: string; values: Exposed[]; aggregator: string } {
    const metric = this.getForPromString();
    metric.values = metric.values.map(({ labels, sharedLabels, ...rest }) => ({ ...rest, labels: { ...labels, ...sharedLabels } }));
    return metric;
  }

  /** Zeroes every series; cells handed out stay valid (the registry's `resetMetrics`). */
  reset(): void {
    for (const { cell } of this.cells.values()) this.clear(cell);
  }

  abstract readonly type: string;
}

export class CounterCell {
  value = 0;

  inc(by = 1): void {
    this.value += by;
  }
}

/** `name` counted by label set: `counter.series({…}).inc(n)`. */
export class CounterFamily<N extends string> extends Family<N, CounterCell> {
  readonly type = 'counter';

  constructor(options: { name: string; help: string; labelNames: readonly N[]; registers: Registry[] }) {
    super(options.name, options.help, options.labelNames, options.registers);
  }

  protected newCell(): CounterCell {
    return new CounterCell();
  }

  protected expose(labels: Labels<N>, cell: CounterCell, into: Exposed[]): void {
    into.push({ labels: { ...labels }, value: cell.value });
  }

  protected clear(cell: CounterCell): void {
    cell.value = 0;
  }
}

export class HistogramCell {
  /** Observations per bucket (not cumulative), the last for those above every bound. */
  readonly counts: Float64Array;
  sum = 0;
  count = 0;

  constructor(private readonly bounds: readonly number[]) {
    this.counts = new Float64Array(bounds.length + 1);
  }

  observe(value: number): void {
    if (!Number.isFinite(value)) return; // a clock gone wrong is not worth a crash on the request path
    const bounds = this.bounds;
    let i = 0;
    while (i < bounds.length && value > bounds[i]!) i++;
    this.counts[i]! += 1;
    this.sum += value;
    this.count += 1;
  }
}

/** `name` as a histogram by label set: `histogram.series({…}).observe(seconds)`. */
export class HistogramFamily<N extends string> extends Family<N, HistogramCell> {
  readonly type = 'histogram';
  private readonly bounds: readonly number[];

  constructor(options: { name: string; help: string; labelNames: readonly N[]; buckets: readonly number[]; registers: Registry[] }) {
    super(options.name, options.help, options.labelNames, options.registers);
    this.bounds = [...options.buckets].sort((a, b) => a - b);
  }

  protected newCell(): HistogramCell {
    return new HistogramCell(this.bounds);
  }

  // prom-client's layout: `le` as the series' own label, the label set as shared labels (so `le`
  // comes first), cumulative buckets, then +Inf, _sum and _count.
  protected expose(labels: Labels<N>, cell: HistogramCell, into: Exposed[]): void {
    const bucket = `${this.name}_bucket`;
    let cumulative = 0;
    for (let i = 0; i < this.bounds.length; i++) {
      cumulative += cell.counts[i]!;
      into.push({ labels: { le: this.bounds[i]! }, sharedLabels: labels, value: cumulative, metricName: bucket, exemplar: null });
    }
    into.push({ labels: { le: '+Inf' }, sharedLabels: labels, value: cell.count, metricName: bucket, exemplar: null });
    into.push({ labels: {}, sharedLabels: labels, value: cell.sum, metricName: `${this.name}_sum` });
    into.push({ labels: {}, sharedLabels: labels, value: cell.count, metricName: `${this.name}_count` });
  }

  protected clear(cell: HistogramCell): void {
    cell.counts.fill(0);
    cell.sum = 0;
    cell.count = 0;
  }
}
