import test from 'ava';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { isQuotaExhausted } from '../../../services/llm-api/chat/dispatch.js';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';

// A provider whose account quota is spent answers 429 `insufficient_quota` until its billing period
// resets. That is a provider failure (502 when it is the answer), not a rate limit: it must not hide
// another provider's failure behind a 429, nor count against its endpoint's health.

const PROVIDER_TEXT = 'You exceeded your current quota, please check your plan and billing details. acct-internal-7731';

interface QuotaUpstream {
  url: string;
  chats(): number;
  close(): Promise<void>;
}

/** A provider that lists its models and answers every completion with OpenAI's spent-quota 429. */
async function startQuotaUpstream(models: string[], error: Record<string, unknown>): Promise<QuotaUpstream> {
  let chats = 0;
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      if (req.method === 'GET' && req.url?.startsWith('/v1/models')) {
        res.writeHead(200, { 'content-type': 'application/json' });
        return void res.end(JSON.stringify({ object: 'list', data: models.map((id) => ({ id, object: 'model', created: 1700000000, owned_by: 'quota' })) }));
      }
      chats++;
      res.writeHead(429, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { message: PROVIDER_TEXT, param: null, ...error } }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`,
    chats: () => chats,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

let h: LlmHarness;
let spent: QuotaUpstream;
let spentByCode: QuotaUpstream;
let other: FakeUpstream;
const ids: Record<string, string> = {};

test.before(async () => {
  spent = await startQuotaUpstream(['shared-model', 'spent-only'], { type: 'insufficient_quota', code: 'insufficient_quota' });
  spentByCode = await startQuotaUpstream(['code-only'], { type: 'requests', code: 'insufficient_quota' });
  other = await startFakeUpstream({ name: 'other', models: [{ id: 'shared-model' }] });
  // One failure is enough to put an endpoint in a cool-down: a spent quota must not.
  h = await startLlmHarness({ LLM_HEALTH_FAILURE_THRESHOLD: '1', LLM_HEALTH_COOLDOWN_MS: '600000' });
  for (const [name, url] of [
    ['Spent', spent.url],
    ['Other', other.url],
    ['Spent by code', spentByCode.url],
  ] as const) {
    const reg = await h.call('POST', '/v1/admin/providers', { name, vendor: 'fake', base_url: url });
    if (reg.status !== 201) throw new Error(JSON.stringify(reg.body));
    ids[name] = reg.body.id;
  }
});
test.after.always(async () => {
  await h?.close();
  await spent?.close();
  await spentByCode?.close();
  await other?.close();
});

const ask = (model: string, stream: boolean) => h.call('POST', '/v1/chat/completions', { model, stream, messages: [{ role: 'user', content: 'hi' }] }, h.user);
const healthy = async (name: string) => (await h.call('GET', `/v1/admin/providers/${ids[name]}`)).body.endpoints.map((e: { healthy: boolean }) => e.healthy);

test('isQuotaExhausted: an OpenAI error body whose type or code is insufficient_quota, nothing else', (t) => {
  t.true(isQuotaExhausted('{"error":{"message":"x","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}'));
  t.true(isQuotaExhausted('{"error":{"type":"insufficient_quota"}}'));
  t.true(isQuotaExhausted('{"error":{"type":"requests","code":"insufficient_quota"}}'));
  t.false(isQuotaExhausted('{"error":{"type":"requests","code":"rate_limit_exceeded","message":"insufficient_quota is not this"}}'));
  t.false(isQuotaExhausted('{"error":{"type":"tokens","code":null}}'));
  t.false(isQuotaExhausted('insufficient_quota'));
  t.false(isQuotaExhausted('{"error":"insufficient_quota"}'));
  t.false(isQuotaExhausted('{"error":{"type":"insufficient_quota"'));
  t.false(isQuotaExhausted('null'));
  t.false(isQuotaExhausted(''));
});

test.serial('a spent quota and another provider\'s 503: the client gets the 502, not a 429; the spent endpoint stays healthy', async (t) => {
  other.failAll(503);
  for (const stream of [false, true]) {
    const before = spent.chats();
    const res = await ask('shared-model', stream);
    t.is(res.status, 502, JSON.stringify(res.body));
    t.like(res.body.error, { type: 'internal_error', code: 'upstream_error', message: 'The model provider failed (upstream status 503)' });
    t.is(res.headers.get('retry-after'), null);
    t.is(spent.chats(), before + 1, 'the spent provider was tried first');
  }
  t.deepEqual(await healthy('Spent'), [true]);
  t.deepEqual(await healthy('Other'), [false]);
});

test.serial('a spent quota is the answer only as a 502 upstream_error saying so, without the provider text', async (t) => {
  for (const model of ['spent-only', 'code-only']) {
    for (const stream of [false, true]) {
      const res = await ask(model, stream);
      t.is(res.status, 502, `${model}: ${JSON.stringify(res.body)}`);
      t.like(res.body.error, { type: 'internal_error', code: 'upstream_error', param: null, message: "The model provider's quota is exhausted (upstream status 429)" });
      t.is(res.headers.get('retry-after'), null);
      t.false(JSON.stringify(res.body).includes('acct-internal-7731'));
    }
  }
  // Again and again: never a cool-down, so the provider is tried first once its quota is back.
  t.deepEqual(await healthy('Spent'), [true]);
  t.deepEqual(await healthy('Spent by code'), [true]);
});

test.serial('a real 429 elsewhere still wins over a spent quota, its Retry-After capped as not every failure was a rate limit', async (t) => {
  other.failAll(429, { retryAfter: '30' });
  for (const stream of [false, true]) {
    const res = await ask('shared-model', stream);
    t.is(res.status, 429, JSON.stringify(res.body));
    t.like(res.body.error, { type: 'rate_limit_error', code: 'rate_limit_exceeded' });
    t.is(res.headers.get('retry-after'), '5');
  }
  t.deepEqual(await healthy('Spent'), [true]);
});
