import http from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import { EgressRefusedError } from '../../services/kit/index.js';
import { loadLlmApiConfig } from '../../services/llm-api/config.js';
import { upstreamFor } from '../../services/llm-api/deps.js';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../fakes/llm-harness.js';
import { freePort } from '../helpers/process.js';

/**
 * Provider URLs are admin input that the platform calls with the provider's API key as a bearer
 * token. With PROVIDER_URL_ALLOW empty, the egress guard's rules apply: a loopback or private URL
 * is never called (the key never leaves), and sync errors say nothing about what answered.
 */

let fake: FakeUpstream;
let guarded: LlmHarness;
let listed: LlmHarness;

test.before(async () => {
  fake = await startFakeUpstream({ name: 'internal', apiKey: 'sk-provider-secret', models: [{ id: 'm1' }] });
  guarded = await startLlmHarness({ PROVIDER_URL_ALLOW: '' });
  listed = await startLlmHarness({ PROVIDER_URL_ALLOW: '127.0.0.1' });
});
test.after.always(async () => {
  await guarded?.close();
  await listed?.close();
  await fake?.close();
});

test.serial('empty PROVIDER_URL_ALLOW: a loopback provider is never called, and the error is generic', async (t) => {
  const before = fake.requests.length;
  // Refused before anything is stored: a refused destination is the admin's configuration, not an upstream failure.
  const created = await guarded.call('POST', '/v1/admin/providers', { name: 'Internal', vendor: 'fake', base_url: fake.url, api_key: 'sk-provider-secret' });
  t.is(created.status, 400);
  t.is(created.body.error.param, 'base_url');
  t.regex(created.body.error.message, /not an allowed destination/);
  t.false(JSON.stringify(created.body).includes(String(fake.port)), 'no port in the error');
  const listed = await guarded.call('GET', '/v1/admin/providers');
  t.false(JSON.stringify(listed.body).includes('Internal'), 'no provider was stored');
  t.is(fake.requests.length, before, 'the fake upstream saw no request, so no key left');
});

test.serial('empty PROVIDER_URL_ALLOW: the chat upstream refuses loopback, translated and trailing-dot spellings', async (t) => {
  const upstream = upstreamFor(loadLlmApiConfig(guarded.service.runtime.config.env));
  t.teardown(() => upstream.close());
  const before = fake.requests.length;
  for (const base of [fake.url, `http://[::ffff:0:7f00:1]:${fake.port}/v1`, `http://LOCALHOST.:${fake.port}/v1`, `http://localhost:${fake.port}/v1`]) {
    await t.throwsAsync(upstream.postJson(`${base}/chat/completions`, '{}', { apiKey: 'sk-provider-secret', requestId: 'req_guard' }), undefined, base);
  }
  const error = await t.throwsAsync(upstream.postJson(`${fake.url}/chat/completions`, '{}', { apiKey: null, requestId: 'req_guard' }));
  t.true(error instanceof EgressRefusedError || (error as { cause?: unknown }).cause instanceof EgressRefusedError);
  t.is(fake.requests.length, before);
});

test.serial('listed loopback: sync errors are the same whether a port is closed or answers something else', async (t) => {
  const other = http.createServer((_req, res) => res.writeHead(404).end('nginx internal admin panel'));
  await new Promise<void>((resolve) => other.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((r) => other.close(() => r())));
  const closedPort = await freePort();
  const answers = [];
  for (const [name, url] of [['Closed', `http://127.0.0.1:${closedPort}/v1`], ['Other', `http://127.0.0.1:${(other.address() as AddressInfo).port}/v1`]]) {
    const created = await listed.call('POST', '/v1/admin/providers', { name: name!, vendor: 'fake', base_url: url! });
    t.is(created.status, 201);
    const view = await listed.call('GET', `/v1/admin/providers/${created.body.id}`);
    answers.push([created.body.sync_error, view.body.last_sync_error]);
  }
  t.deepEqual(answers[0], answers[1]);
  t.notRegex(String(answers[0]![0]), /404|ECONNREFUSED|nginx|127\.0\.0\.1/);
  // A listed destination works as before.
  const ok = await listed.call('POST', '/v1/admin/providers', { name: 'Fake', vendor: 'fake', base_url: fake.url, api_key: 'sk-provider-secret' });
  t.is(ok.body.sync_error, null);
});

test('PROVIDER_URL_ALLOW entries are validated at start', async (t) => {
  // The catalog declares the setting; the platform's start checks every owner's settings.
  const { loadPlatformConfig } = await import('../../services/platform/config.js');
  const { loadCatalogConfig } = await import('../../domains/catalog/index.js');
  t.throws(() => loadPlatformConfig({ PROVIDER_URL_ALLOW: '10.0.0.0/99' }), { message: /PROVIDER_URL_ALLOW/ });
  t.deepEqual(loadCatalogConfig({ PROVIDER_URL_ALLOW: 'api.openai.com, 10.0.0.0/8' }).PROVIDER_URL_ALLOW, ['api.openai.com', '10.0.0.0/8']);
});
