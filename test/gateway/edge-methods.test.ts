import test from 'ava';
import { edgeMetricsUrl, gatewayService } from '../../services/gateway/service.js';
import { ManualClock } from '../../services/kit/clock.js';
import { openProcessRuntime, serviceUrls, startService, type StartedService } from '../../services/kit/index.js';
import type { ProcessRuntime } from '../../services/kit/index.js';
import { testConfig } from '../helpers/env.js';
import { startEdgeWithFakes } from './edge-harness.js';

// A path the edge serves for some methods only (its probes, the console's files, the API document,
// and /metrics on its metrics listener) answers another method with 405, an Allow header and the error body, as the
// services do; a path no route serves stays 404.
let edge: Awaited<ReturnType<typeof startEdgeWithFakes>>;
let alone: { started: StartedService<ProcessRuntime>; runtime: ProcessRuntime; url: string };

test.before(async () => {
  edge = await startEdgeWithFakes({ clock: new ManualClock() });
  // The gateway service itself (no database, no bus), for the routes it answers before the deck.
  const config = testConfig({ METRICS_ENABLED: 'true' });
  const runtime = openProcessRuntime(config, { name: 'edge-methods' });
  const started = await startService(gatewayService, { runtime, gatewaySecret: config.GATEWAY_SHARED_SECRET!, urls: serviceUrls(config) });
  alone = { started, runtime, url: `http://127.0.0.1:${started.server.port}` };
});
test.after.always(async () => {
  await edge?.close();
  if (alone) {
    await alone.started.server.close(1_000);
    await alone.started.stop();
    await alone.runtime.close();
  }
});

async function call(base: string, method: string, path: string) {
  const res = await fetch(`${base}${path}`, { method, headers: { 'x-request-id': `req-${method}-${path.length}` } });
  const text = await res.text();
  return { status: res.status, allow: res.headers.get('allow'), requestId: res.headers.get('x-request-id'), body: text ? JSON.parse(text) : null };
}

for (const [method, path, allow] of [
  ['POST', '/healthz', 'GET, HEAD'],
  ['DELETE', '/readyz', 'GET, HEAD'],
  ['POST', '/console/', 'GET, HEAD'],
  ['PUT', '/console/assets/app.js', 'GET, HEAD'],
  ['POST', '/openapi.json', 'GET, HEAD'],
] as const) {
  test(`${method} ${path} → 405 Allow: ${allow}, with the error body`, async (t) => {
    const res = await call(edge.url, method, path);
    t.is(res.status, 405);
    t.is(res.allow, allow);
    t.is(res.requestId, res.body.error.request_id);
    t.like(res.body.error, { type: 'invalid_request_error', code: 'method_not_allowed', param: null });
    t.true(res.body.error.message.includes(allow), res.body.error.message);
  });
}

test('the allowed methods still go through, and a path no route serves is still 404', async (t) => {
  t.is((await call(edge.url, 'GET', '/healthz')).status, 200);
  t.is((await call(edge.url, 'GET', '/console/')).status, 200, 'proxied to the (fake) upstream');
  t.is((await call(edge.url, 'PUT', '/v1/media/signed/abc')).status, 200);
  const nowhere = await call(edge.url, 'POST', '/nowhere-at-all');
  t.is(nowhere.status, 404);
  t.is(nowhere.allow, null);
  t.is(nowhere.body.error.type, 'not_found_error');
});

test("the edge's own /metrics (its metrics listener): GET answers, other methods 405 with Allow and the error body", async (t) => {
  const metricsUrl = edgeMetricsUrl(alone.started.ctx)!;
  const metrics = await fetch(`${metricsUrl}/metrics`);
  t.is(metrics.status, 200);
  t.regex(await metrics.text(), /edge_/);
  const post = await call(metricsUrl, 'POST', '/metrics');
  t.is(post.status, 405);
  t.is(post.allow, 'GET, HEAD');
  t.is(post.requestId, post.body.error.request_id);
  t.like(post.body.error, { type: 'invalid_request_error', code: 'method_not_allowed', param: null });
});
