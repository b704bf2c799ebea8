import test from 'ava';
import { Counter, Histogram, Registry } from 'prom-client';
import { CounterFamily, HistogramFamily } from '../../services/kit/http/index.js';

// The kit's request-path series must render exactly as prom-client's own Counter and Histogram do,
// so dashboards and alerts written against prom-client's output keep working.

function registries() {
  const ours = new Registry();
  const theirs = new Registry();
  for (const registry of [ours, theirs]) registry.setDefaultLabels({ service: 'test' });
  return { ours, theirs };
}

// What a consumer of the JSON form receives (keys whose value is undefined are not sent).
const asJson = (value: unknown) => JSON.parse(JSON.stringify(value)) as unknown;

const buckets = [0.001, 0.01, 0.1, 1];
const observations: Array<[string, string, number]> = [
  ['GET', '200', 0.0005],
  ['GET', '200', 0.01], // on a bound: counted in that bucket, as prom-client does
  ['GET', '200', 0.5],
  ['POST', '500', 7], // above every bound: +Inf only
  ['GET', '200', 0.001],
  ['POST', 'a"b\\c\nd', 0.05], // label values that need escaping
];

test('a counter family renders as prom-client’s Counter', async (t) => {
  const { ours, theirs } = registries();
  const mine = new CounterFamily({ name: 'requests_total', help: 'Requests by method and status', labelNames: ['method', 'status'] as const, registers: [ours] });
  const reference = new Counter({ name: 'requests_total', help: 'Requests by method and status', labelNames: ['method', 'status'] as const, registers: [theirs] });
  for (const [method, status] of observations) {
    mine.series({ method, status }).inc();
    reference.inc({ method, status });
  }
  mine.series({ method: 'GET', status: '200' }).inc(2.5);
  reference.inc({ method: 'GET', status: '200' }, 2.5);
  t.is(await ours.metrics(), await theirs.metrics());
  t.deepEqual(asJson(await ours.getMetricsAsJSON()), asJson(await theirs.getMetricsAsJSON()));
  t.regex(await ours.metrics(), /requests_total\{method="GET",status="200",service="test"\} 6\.5/);
});

test('a histogram family renders as prom-client’s Histogram, buckets cumulative, +Inf, sum and count', async (t) => {
  const { ours, theirs } = registries();
  const mine = new HistogramFamily({ name: 'latency_seconds', help: 'Latency', labelNames: ['method', 'status'] as const, buckets, registers: [ours] });
  const reference = new Histogram({ name: 'latency_seconds', help: 'Latency', labelNames: ['method', 'status'] as const, buckets, registers: [theirs] });
  for (const [method, status, seconds] of observations) {
    mine.series({ method, status }).observe(seconds);
    reference.observe({ method, status }, seconds);
  }
  t.is(await ours.metrics(), await theirs.metrics());
  t.deepEqual(asJson(await ours.getMetricsAsJSON()), asJson(await theirs.getMetricsAsJSON()));
  const text = await ours.metrics();
  t.regex(text, /latency_seconds_bucket\{le="0\.01",service="test",method="GET",status="200"\} 3/);
  t.regex(text, /latency_seconds_bucket\{le="\+Inf",service="test",method="POST",status="500"\} 1/);
  t.regex(text, /latency_seconds_count\{service="test",method="GET",status="200"\} 4/);
});

test('a cell is found again by its labels, survives a reset (zeroed), and a non-finite observation is dropped', async (t) => {
  const { ours } = registries();
  const counter = new CounterFamily({ name: 'c_total', help: 'c', labelNames: ['k'] as const, registers: [ours] });
  const histogram = new HistogramFamily({ name: 'h_seconds', help: 'h', labelNames: ['k'] as const, buckets, registers: [ours] });
  const cell = counter.series({ k: 'a' });
  t.is(counter.series({ k: 'a' }), cell);
  t.not(counter.series({ k: 'b' }), cell);
  cell.inc(3);
  histogram.series({ k: 'a' }).observe(Number.NaN);
  histogram.series({ k: 'a' }).observe(0.2);
  t.regex(await ours.metrics(), /h_seconds_count\{service="test",k="a"\} 1\n/);
  ours.resetMetrics();
  t.regex(await ours.metrics(), /c_total\{k="a",service="test"\} 0\n/);
  cell.inc();
  t.regex(await ours.metrics(), /c_total\{k="a",service="test"\} 1\n/);
  t.regex(await ours.metrics(), /h_seconds_count\{service="test",k="a"\} 0\n/);
});
