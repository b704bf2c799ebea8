import test from 'ava';
import { edgeMetricsUrl, gatewayService, metricsPort } from '../../services/gateway/service.js';
import { openProcessRuntime, serviceUrls, startService, type ProcessRuntime, type StartedService } from '../../services/kit/index.js';
import { rawExchange } from '../helpers/raw-http.js';
import { testConfig } from '../helpers/env.js';

// The edge's metrics (every copy's series when PLATFORM_PROCESSES > 1, gathered per scrape) are
// served on a listener of their own, on loopback unless set otherwise, as Kong serves them on its
// status listener: never on the public port.
let alone: { started: StartedService<ProcessRuntime>; runtime: ProcessRuntime; url: string };

test.before(async () => {
  const config = testConfig({ METRICS_ENABLED: 'true' });
  const runtime = openProcessRuntime(config, { name: 'edge-metrics-listener' });
  const started = await startService(gatewayService, { runtime, gatewaySecret: config.GATEWAY_SHARED_SECRET!, urls: serviceUrls(config) });
  alone = { started, runtime, url: `http://127.0.0.1:${started.server.port}` };
});
test.after.always(async () => {
  if (alone) {
    await alone.started.server.close(1_000);
    await alone.started.stop();
    await alone.runtime.close();
  }
});

test('the public port does not serve /metrics, in any form; the metrics listener does, on loopback', async (t) => {
  const pub = await fetch(`${alone.url}/metrics`);
  t.is(pub.status, 404);
  t.notRegex(await pub.text(), /edge_requests_total|nodejs_/);
  const port = Number(new URL(alone.url).port);
  const absolute = await rawExchange(port, 'GET http://edge.example/metrics HTTP/1.1\r\nhost: edge.example\r\nconnection: close\r\n\r\n');
  t.regex(absolute, /^HTTP\/1\.1 404 /);
  t.notRegex(absolute, /edge_requests_total|nodejs_/);
  const metricsUrl = edgeMetricsUrl(alone.started.ctx);
  t.truthy(metricsUrl);
  t.is(new URL(metricsUrl!).hostname, '127.0.0.1', 'loopback by default');
  t.not(new URL(metricsUrl!).port, new URL(alone.url).port);
  const scrape = await fetch(`${metricsUrl}/metrics`);
  t.is(scrape.status, 200);
  t.regex(await scrape.text(), /edge_requests_total/);
  // Nothing else is served there.
  const other = await fetch(`${metricsUrl}/v1/models`);
  t.is(other.status, 404);
  t.is(((await other.json()) as { error: { type: string } }).error.type, 'not_found_error');
});

test("the metrics port: EDGE_METRICS_PORT, else Kong's status port beside the proxy port (8000 → 8100)", (t) => {
  t.is(metricsPort(undefined, 8000), 8100);
  t.is(metricsPort(9100, 8000), 9100);
  t.is(metricsPort(undefined, 0), 0, 'a test edge on any free port: metrics on any free port too');
  t.throws(() => metricsPort(undefined, 65500), { message: /EDGE_METRICS_PORT/ });
});
