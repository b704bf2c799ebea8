import { readFileSync } from 'node:fs';
import test from 'ava';
import OpenAI from 'openai';
import { randomBase62 } from '../../services/kit/index.js';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';
import { waitFor } from '../helpers/wait.js';
import { startReceiver, type Receiver } from '../webhooks/helpers.js';

// After real traffic (chats through the edge with the openai SDK, one webhook delivery), the edge's
// and every service's /metrics carry the domain series with the right labels, the process series,
// and the outbox and bus backlog; the Grafana dashboard queries only series that exist.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
let p: TestPlatform;
let fake: FakeUpstream;
let receiver: Receiver;
let providerId: string;
let usage: { prompt: number; completion: number };
const scrapes: Record<string, string> = {};

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The Prometheus text format, parsed into samples (comments skipped). */
function parse(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!;
    out.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return out;
}

const find = (text: string, name: string, labels: Record<string, string> = {}) =>
  parse(text).filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));

test.before(async () => {
  fake = await startFakeUpstream({ name: 'alpha', models: [{ id: 'model-a' }] });
  receiver = await startReceiver(() => 200);
  p = await startTestPlatform({ env: { BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY, LLM_HEALTH_PROBE_INTERVAL_MS: '0', LLM_USAGE_FLUSH_MS: '20', EGRESS_ALLOW_HOSTS: '127.0.0.1' } });
  const admin = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: 'unused', maxRetries: 0, defaultHeaders: { 'X-API-Key': ADMIN_KEY, Authorization: null } });
  providerId = ((await admin.post('/admin/providers', { body: { name: 'Alpha', vendor: 'fake', base_url: fake.url } })) as any).id;
  const json = await admin.chat.completions.create({ model: 'model-a', messages: [{ role: 'user', content: 'one two three' }] });
  const stream = await admin.chat.completions.create({ model: 'model-a', stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'four five' }] });
  let streamed: OpenAI.CompletionUsage | undefined;
  for await (const chunk of stream) streamed = chunk.usage ?? streamed;
  usage = { prompt: json.usage!.prompt_tokens + streamed!.prompt_tokens, completion: json.usage!.completion_tokens + streamed!.completion_tokens };

  const webhook: any = await admin.post('/admin/webhooks', { body: { url: receiver.url('/hook'), events: ['model.added'] } });
  await admin.post(`/admin/webhooks/${webhook.id}/test`);
  await receiver.until((rs) => rs.some((r) => r.headers['x-webhook-id'] === webhook.id));

  scrapes.edge = await (await fetch(`${p.metricsUrl}/metrics`)).text();
  scrapes['llm-api'] = await waitFor(async () => {
    const text = await (await fetch(`${p.serviceUrl('llm-api')}/metrics`)).text();
    // Delivered, and nothing else due: another delivery to the subscription (an event it also
    // receives) may still wait for its first attempt, and the lag is read once none does.
    const delivered = find(text, 'webhook_delivery_attempts_recent', { outcome: 'delivered' })[0]?.value ?? 0;
    return delivered >= 1 && find(text, 'webhook_deliveries_pending')[0]?.value === 0 ? text : null;
  }, 15_000, 'webhook attempt on llm-api /metrics');
  for (const name of ['response-api', 'media-api', 'mcp-tools']) scrapes[name] = await (await fetch(`${p.serviceUrl(name)}/metrics`)).text();
});

test.after.always(async () => {
  await p?.stop();
  await fake?.close();
  await receiver?.close();
});

test('llm-api: tokens and cost by model and provider, upstream latency by endpoint, requests by outcome', (t) => {
  const text = scrapes['llm-api']!;
  const prompt = find(text, 'llm_tokens_total', { model: 'model-a', provider: providerId, kind: 'prompt' });
  const completion = find(text, 'llm_tokens_total', { model: 'model-a', provider: providerId, kind: 'completion' });
  t.is(prompt[0]?.value, usage.prompt);
  t.is(completion[0]?.value, usage.completion);
  t.is(find(text, 'llm_cost_micro_usd_total', { model: 'model-a', provider: providerId }).length, 1);
  t.is(find(text, 'llm_requests_total', { model: 'model-a', provider: providerId, outcome: 'ok' })[0]?.value, 2);
  const endpoint = new URL(fake.url).origin;
  t.is(find(text, 'llm_upstream_latency_seconds_count', { provider: providerId, endpoint, status: '200' })[0]?.value, 2);
  t.true((find(text, 'llm_upstream_connections_opened_total', { endpoint, protocol: 'http/1.1' })[0]?.value ?? 0) >= 1);
  t.true(text.includes('# TYPE llm_upstream_connections gauge'));
  t.true(text.includes('# TYPE llm_upstream_errors_total counter'));
  t.true(text.includes('# TYPE llm_upstream_endpoint_unhealthy gauge'));
});

test('llm-api: webhook attempts by outcome and the delivery lag', (t) => {
  const text = scrapes['llm-api']!;
  t.true((find(text, 'webhook_delivery_attempts_recent', { outcome: 'delivered' })[0]?.value ?? 0) >= 1);
  t.is(find(text, 'webhook_delivery_attempts_recent', { outcome: 'dead' })[0]?.value, 0);
  t.is(find(text, 'webhook_delivery_lag_seconds')[0]?.value, 0);
});

test('outbox backlog and bus consumer lag by queue', (t) => {
  const text = scrapes['llm-api']!;
  const pending = find(text, 'outbox_events_pending');
  t.is(pending.length, 1);
  t.true(pending[0]!.value >= 0);
  t.is(find(text, 'outbox_oldest_pending_seconds').length, 1);
  // The webhook worker consumes in this process: its queues are reported, each with a count.
  const lag = find(text, 'bus_consumer_lag_messages');
  t.true(lag.length >= 1, 'at least one consumed queue');
  t.true(lag.every((s) => s.labels.queue && !s.labels.queue.startsWith(p.platform.ctx.runtime.config.BUS_QUEUE_PREFIX!) && s.value >= 0));
});

test('the edge: requests by decK route and status, and Node process series on every /metrics', (t) => {
  t.true((find(scrapes.edge!, 'edge_requests_total', { route: 'llm-api-v1', status: '200', service: 'gateway' })[0]?.value ?? 0) >= 2);
  for (const [name, text] of Object.entries(scrapes)) {
    const service = name === 'edge' ? 'gateway' : name;
    for (const series of ['nodejs_heap_size_used_bytes', 'process_resident_memory_bytes', 'nodejs_eventloop_delay_seconds']) {
      t.true(find(text, series, { service }).length >= 1, `${series} on ${name}`);
    }
    t.true(text.includes('# TYPE nodejs_gc_duration_seconds histogram'), `GC series on ${name}`);
  }
});

test('every series the Grafana dashboard queries is one the platform exports', (t) => {
  const dashboard = JSON.parse(readFileSync(new URL('../../deploy/grafana/platform-dashboard.json', import.meta.url), 'utf8'));
  const exprs: string[] = [];
  const walk = (node: unknown) => {
    if (Array.isArray(node)) node.forEach(walk);
    else if (node && typeof node === 'object') {
      for (const [k, v] of Object.entries(node)) {
        if (k === 'expr' && typeof v === 'string') exprs.push(v);
        else walk(v);
      }
    }
  };
  walk(dashboard);
  t.true(exprs.length >= 10, 'the dashboard has queries');
  // Names declared on any scrape (`# TYPE name kind`), with a histogram's _bucket/_sum/_count.
  const exported = new Set<string>();
  for (const text of Object.values(scrapes)) {
    for (const m of text.matchAll(/^# TYPE (\S+) (\S+)/gm)) {
      exported.add(m[1]!);
      if (m[2] === 'histogram' || m[2] === 'summary') for (const suffix of ['_bucket', '_sum', '_count']) exported.add(m[1]! + suffix);
    }
  }
  const functions = new Set(['sum', 'rate', 'irate', 'increase', 'histogram_quantile', 'max', 'min', 'avg', 'by', 'without', 'topk', 'clamp_min', 'on', 'ignoring', 'group_left', 'count', 'le', 'bool', 'and', 'or', 'unless', 'offset', 'vector', 'abs', 'delta', 'deriv', 'avg_over_time', 'max_over_time']);
  for (const expr of exprs) {
    const withoutStrings = expr.replace(/"[^"]*"/g, '""').replace(/\{[^}]*\}/g, '').replace(/\[[^\]]*\]/g, '').replace(/\$\w+/g, '').replace(/(?<![\w:])\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/g, '');
    const names = [...withoutStrings.matchAll(/[a-zA-Z_:][\w:]*/g)].map((m) => m[0]).filter((n) => !functions.has(n) && !/^(by|without)$/.test(n));
    const labelsInBy = [...expr.matchAll(/\b(?:by|without)\s*\(([^)]*)\)/g)].flatMap((m) => m[1]!.split(',').map((s) => s.trim()));
    for (const name of names) {
      if (labelsInBy.includes(name)) continue;
      t.true(exported.has(name), `dashboard queries ${name} (in: ${expr}), which no /metrics exports`);
    }
  }
});
