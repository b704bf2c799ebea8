import http from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';
import { waitFor } from '../../helpers/wait.js';

// Seeded endpoint choice (LLM_ROUTING_SEED) so the weighted distribution is reproducible.
let h: LlmHarness;
const fakes: FakeUpstream[] = [];
const fake = async (name: string, models: string[]) => {
  const f = await startFakeUpstream({ name, models: models.map((id) => ({ id })) });
  fakes.push(f);
  return f;
};

test.before(async () => {
  h = await startLlmHarness({ LLM_ROUTING_SEED: '42', LLM_HEALTH_FAILURE_THRESHOLD: '2', LLM_HEALTH_COOLDOWN_MS: '600000', LLM_HEALTH_PROBE_INTERVAL_MS: '30', LLM_UPSTREAM_HEADERS_TIMEOUT_MS: '400' });
});
test.after.always(async () => {
  await h?.close();
  for (const f of fakes) await f.close();
});

const chat = (model: string, content = 'hi') => h.call('POST', '/v1/chat/completions', { model, messages: [{ role: 'user', content }] }, h.user);
const streamChat = (model: string, content = 'hi') => h.call('POST', '/v1/chat/completions', { model, messages: [{ role: 'user', content }], stream: true }, h.user);

/**
 * A provider that accepts every stream (200, text/event-stream) and sends an error event as its
 * first event (as vLLM does when the engine fails before the first token): `#context` in the last
 * user message makes it a context-length error, otherwise an engine failure quoting a secret.
 */
async function leadingErrorUpstream(models: string[]): Promise<{ url: string; chats(): number; close(): Promise<void> }> {
  let chats = 0;
  const server = http.createServer(async (req, res) => {
    let raw = '';
    for await (const piece of req) raw += String(piece);
    if (req.method === 'GET') {
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ object: 'list', data: models.map((id) => ({ id, object: 'model', created: 1700000000, owned_by: 'lead' })) }));
    }
    chats++;
    const error = raw.includes('#context')
      ? { message: "This model's maximum context length is 4096 tokens. However, you requested 9000 tokens.", type: 'BadRequestError', param: null, code: 400 }
      : { message: 'engine dead at 10.0.0.7 key sk-secret-engine-key-123456', type: 'InternalServerError', param: null, code: 500 };
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.end(`: first\n\ndata: ${JSON.stringify({ error })}\n\ndata: [DONE]\n\n`);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`,
    chats: () => chats,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

test.serial('failover across two endpoints when one is down; passive health marks it, the probe restores it', async (t) => {
  const primary = await fake('primary', ['ep-model']);
  const backup = await fake('backup', ['ep-model']);
  const reg = await h.call('POST', '/v1/admin/providers', {
    name: 'Endpoints',
    vendor: 'fake',
    endpoints: [
      { url: primary.url, priority: 0, weight: 1 },
      { url: backup.url, priority: 1, weight: 1 },
    ],
  });
  t.is(reg.status, 201);
  const id = reg.body.id;
  t.is((await chat('ep-model')).body.choices[0].message.content.split(' ')[2], 'primary');

  await primary.down();
  for (let i = 0; i < 2; i++) {
    const res = await chat('ep-model');
    t.is(res.status, 200);
    t.true(res.body.choices[0].message.content.startsWith('Hello from backup'));
  }
  const stream = await streamChat('ep-model');
  t.is(stream.status, 200);
  t.true(String(stream.body).includes('backup'));
  // Two consecutive failures (threshold 2): unhealthy, visible to admins.
  const view = await h.call('GET', `/v1/admin/providers/${id}`);
  t.deepEqual(view.body.endpoints.map((e: any) => e.healthy), [false, true]);
  // Now skipped: requests go straight to the backup.
  const backupBefore = backup.chatCount();
  await chat('ep-model');
  t.is(backup.chatCount(), backupBefore + 1);

  await primary.up();
  await waitFor(async () => (await h.call('GET', `/v1/admin/providers/${id}`)).body.endpoints[0].healthy === true, 30_000, 'the primary endpoint healthy again');
  t.true((await h.call('GET', `/v1/admin/providers/${id}`)).body.endpoints[0].healthy);
  t.true((await chat('ep-model')).body.choices[0].message.content.startsWith('Hello from primary'));
});

test.serial('failover across two providers offering the same model (5xx, 429, connect error), before the first byte', async (t) => {
  const first = await fake('first', ['dup-model']);
  const second = await fake('second', ['dup-model']);
  await h.call('POST', '/v1/admin/providers', { name: 'First', vendor: 'fake', base_url: first.url });
  await h.call('POST', '/v1/admin/providers', { name: 'Second', vendor: 'fake', base_url: second.url });
  const catalogs = await h.service.runtime.db.knex('llm_model_catalogs').where({ public_id: 'dup-model' });
  t.is(catalogs.length, 1);
  t.true((await chat('dup-model')).body.choices[0].message.content.startsWith('Hello from first'));

  for (const status of [500, 503, 429]) {
    first.failAll(status);
    const res = await chat('dup-model');
    t.is(res.status, 200, String(status));
    t.true(res.body.choices[0].message.content.startsWith('Hello from second'));
    const s = await streamChat('dup-model');
    t.is(s.status, 200);
    t.true(String(s.body).includes('second'));
  }
  first.failAll(null);
  // Both rate limited → 429 with a bounded Retry-After.
  first.failAll(429, { retryAfter: '120' });
  second.failAll(429, { retryAfter: '7' });
  const limited = await chat('dup-model');
  t.is(limited.status, 429);
  t.is(limited.body.error.type, 'rate_limit_error');
  t.true(Number(limited.headers.get('retry-after')) <= 60);
  // A Retry-After given as an HTTP date is read against the provider's own Date header (not as 1 s).
  const inHalfAMinute = new Date(Date.now() + 30_000).toUTCString();
  first.failAll(429, { retryAfter: inHalfAMinute });
  second.failAll(429, { retryAfter: inHalfAMinute });
  const dated = await chat('dup-model');
  t.is(dated.status, 429);
  const waited = Number(dated.headers.get('retry-after'));
  t.true(waited >= 28 && waited <= 31, `retry-after ${waited}`);
  // Both failing with 5xx → 502 upstream_error.
  first.failAll(500);
  second.failAll(502);
  const failed = await chat('dup-model');
  t.is(failed.status, 502);
  t.is(failed.body.error.code, 'upstream_error');
  first.failAll(null);
  second.failAll(null);
  // The first provider accepts the stream (200 head) and dies before any body byte: still failed over.
  first.streamsDieEarly(true);
  const early = await streamChat('dup-model');
  t.is(early.status, 200);
  t.true(String(early.body).includes('second'));
  t.true(String(early.body).endsWith('data: [DONE]\n\n'));
  first.streamsDieEarly(false);
  // A provider slower than LLM_UPSTREAM_HEADERS_TIMEOUT_MS (400 ms here) is failed over; both slow → 504.
  first.delayAll(1500);
  t.true((await chat('dup-model')).body.choices[0].message.content.startsWith('Hello from second'));
  second.delayAll(1500);
  const slow = await chat('dup-model');
  t.is(slow.status, 504);
  t.is(slow.body.error.code, 'upstream_timeout');
  first.delayAll(0);
  second.delayAll(0);
  // Connection refused at the first provider.
  await first.down();
  t.true((await chat('dup-model')).body.choices[0].message.content.startsWith('Hello from second'));
  await first.up();
  // A 400 from the provider is the request's fault: no failover, shape A to the client.
  const bad = await chat('dup-model', '#fail:400');
  t.is(bad.status, 400);
  t.is(bad.body.error.type, 'invalid_request_error');
});

test.serial('priority first, weight among equals (seeded; within tolerance over many requests), admin-disabled endpoints unused', async (t) => {
  const heavy = await fake('heavy', ['w-model']);
  const light = await fake('light', ['w-model']);
  const spare = await fake('spare', ['w-model']);
  const off = await fake('off', ['w-model']);
  await h.call('POST', '/v1/admin/providers', {
    name: 'Weighted',
    vendor: 'fake',
    endpoints: [
      { url: heavy.url, priority: 0, weight: 3 },
      { url: light.url, priority: 0, weight: 1 },
      { url: spare.url, priority: 1, weight: 100 },
      { url: off.url, priority: 0, weight: 100, healthy: false },
    ],
  });
  const N = 400;
  for (let i = 0; i < N; i++) t.is((await chat('w-model')).status, 200);
  t.is(spare.chatCount(), 0);
  t.is(off.chatCount(), 0);
  t.is(heavy.chatCount() + light.chatCount(), N);
  // Expected 300 / 100; tolerance ±10 % of N.
  t.true(Math.abs(heavy.chatCount() - 300) <= 40, `heavy ${heavy.chatCount()}`);
  t.true(Math.abs(light.chatCount() - 100) <= 40, `light ${light.chatCount()}`);
  // With both priority-0 endpoints failing, the priority-1 endpoint takes over.
  heavy.failAll(500);
  light.failAll(500);
  t.true((await chat('w-model')).body.choices[0].message.content.startsWith('Hello from spare'));
  heavy.failAll(null);
  light.failAll(null);
});

test.serial('a model no reachable provider ever listed answers 404 model_not_found', async (t) => {
  await h.call('POST', '/v1/admin/providers', { name: 'Ghost', vendor: 'fake', base_url: 'http://127.0.0.1:9/v1' });
  t.is((await chat('ghost-model')).status, 404);
  t.is((await chat('ghost-model')).body.error.code, 'model_not_found');
});

test.serial("a stream whose provider's first event is an error is failed over before the 200; with no provider left, a JSON error", async (t) => {
  const leading = await leadingErrorUpstream(['lead-model', 'lead-only']);
  t.teardown(() => leading.close());
  const healthy = await fake('after-lead', ['lead-model']);
  // Registered first, so the provider with the error event is tried first.
  await h.call('POST', '/v1/admin/providers', { name: 'Leading', vendor: 'fake', base_url: leading.url });
  await h.call('POST', '/v1/admin/providers', { name: 'AfterLead', vendor: 'fake', base_url: healthy.url });

  const served = await streamChat('lead-model');
  t.is(served.status, 200);
  t.true(String(served.body).includes('"content":" after-lead"'));
  t.true(String(served.body).endsWith('data: [DONE]\n\n'));
  t.false(String(served.body).includes('"error"'));
  t.is(leading.chats(), 1);

  // Nothing was sent yet: the client gets a status it (and its SDK's retries) can act on, not a 200 stream.
  const failed = await streamChat('lead-only');
  t.is(failed.status, 502);
  t.regex(failed.headers.get('content-type')!, /^application\/json/);
  t.like(failed.body.error, { type: 'internal_error', code: 'upstream_error' });
  t.false(JSON.stringify(failed.body).includes('secret'));
  t.false(JSON.stringify(failed.body).includes('10.0.0.7'));

  // An error the request caused (its context is too long) is the client's 400, as the provider's HTTP 400 would be; not tried elsewhere.
  const before = healthy.chatCount();
  const tooLong = await streamChat('lead-model', 'a long story #context');
  t.is(tooLong.status, 400);
  t.like(tooLong.body.error, { type: 'invalid_request_error', code: 'context_length_exceeded', param: 'messages' });
  t.is(healthy.chatCount(), before);
});
