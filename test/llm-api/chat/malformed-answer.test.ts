import test from 'ava';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { ApiError } from '../../../services/kit/index.js';
import { normalizeCompletion } from '../../../services/llm-api/chat/normalize.js';
import type { ChatCompletion } from '../../../services/llm-api/chat/types.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';
import { waitFor } from '../../helpers/wait.js';

// A provider that answers 200 with JSON that is not a chat completion: the client gets the same 502
// as for an answer that is not JSON at all, never a 500 (a server bug the SDK retries) nor a 200
// that hides the fault; the endpoint's health and the usage record are treated alike too.
let h: LlmHarness;
let upstream: http.Server;
let answer = '';
let chats = 0;
let providerId: string;

test.before(async () => {
  upstream = http.createServer(async (req, res) => {
    await new Promise((resolve) => req.resume().on('end', resolve));
    if (req.method === 'GET') {
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ object: 'list', data: [{ id: 'odd-model', object: 'model', created: 1, owned_by: 'odd' }] }));
    }
    chats++;
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(answer);
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  // One failure would be enough to mark the endpoint unhealthy, were these counted as failures.
  h = await startLlmHarness({ LLM_HEALTH_FAILURE_THRESHOLD: '1', LLM_HEALTH_COOLDOWN_MS: '600000' });
  const reg = await h.call('POST', '/v1/admin/providers', { name: 'Odd', vendor: 'odd', base_url: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/v1` });
  providerId = reg.body.id;
});
test.after.always(async () => {
  await h?.close();
  upstream?.closeAllConnections();
  await new Promise((resolve) => upstream?.close(resolve));
});

const ask = async (body: string) => {
  answer = body;
  const before = chats;
  const res = await h.call('POST', '/v1/chat/completions', { model: 'odd-model', messages: [{ role: 'user', content: 'x' }] }, h.user);
  return { ...res, sent: chats - before };
};
const endpointsHealthy = async () => (await h.call('GET', `/v1/admin/providers/${providerId}`)).body.endpoints.map((e: { healthy: boolean }) => e.healthy);
const usageOf = (requestId: string) =>
  waitFor(async () => (await h.service.runtime.db.knex('llm_usage').where({ request_id: requestId }).first()) ?? null, 5000, 'usage row');

test.serial('an answer not shaped like a chat completion is a 502 upstream_error, like one that is not JSON', async (t) => {
  const notJson = await ask('this is not json');
  t.is(notJson.status, 502);
  const expected = { type: 'internal_error', code: 'upstream_error', message: notJson.body.error.message, param: null };
  for (const body of [
    '{"choices":[null]}',
    '{"choices":[{"message":"hi"}]}',
    '{"choices":[["a"]]}',
    '{"choices":[{"index":0,"message":["hi"]}]}',
    '{"choices":"nope"}',
    '{"choices":{"0":{"message":{"role":"assistant","content":"x"}}}}',
    '{"id":"no-choices"}',
    '{"choices":[{"index":0,"message":{"role":"assistant","content":"x"}}],"usage":"lots"}',
    '{"choices":[{"index":0,"message":{"role":"assistant","content":"x"}}],"usage":[1,2]}',
  ]) {
    const res = await ask(body);
    t.is(res.status, 502, body);
    t.like(res.body.error, expected, body);
    t.is(res.sent, 1, `${body}: the gateway asked once`);
    t.false(JSON.stringify(res.body).includes('nope') || JSON.stringify(res.body).includes('lots'), 'nothing of the answer is echoed');
    const row = await usageOf(res.body.error.request_id);
    t.like(row, { status: 502, outcome: 'upstream_error' }, body);
  }
  // The provider answered, as it does with a body that is not JSON: its endpoint is not marked.
  t.deepEqual(await endpointsHealthy(), [true]);
});

test.serial('tokens the provider reported with an answer that then failed are recorded: it counted them', async (t) => {
  const res = await ask('{"choices":"nope","usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}');
  t.is(res.status, 502);
  const row = await usageOf(res.body.error.request_id);
  t.like(row, { status: 502, outcome: 'upstream_error', prompt_tokens: 12, completion_tokens: 5, total_tokens: 17 });
});

test.serial('what is merely incomplete is still filled in: a null message, null usage, missing fields', async (t) => {
  const res = await ask('{"choices":[{"message":null},{"index":5,"finish_reason":"length","message":{"content":"x"}}],"usage":null}');
  t.is(res.status, 200, JSON.stringify(res.body));
  t.deepEqual(res.body.choices, [
    { index: 0, logprobs: null, finish_reason: 'stop', message: { role: 'assistant', content: null, refusal: null } },
    { index: 5, logprobs: null, finish_reason: 'length', message: { role: 'assistant', content: 'x', refusal: null } },
  ]);
  t.is(res.body.usage, null);
  t.is(res.body.object, 'chat.completion');
  t.is(res.body.model, 'odd-model');
});

test('normalizeCompletion refuses by type checks, before changing anything, with a 502 whose cause says what was wrong', (t) => {
  const body = { id: 'keep', choices: [{ message: { role: 'assistant', content: 'a' } }, 7] } as unknown as ChatCompletion;
  const error = t.throws(() => normalizeCompletion(body, 'm', 1), { instanceOf: ApiError });
  t.is(error!.status, 502);
  t.is((error!.cause as Error).message, 'choices[1] is not an object');
  t.deepEqual(body as unknown, { id: 'keep', choices: [{ message: { role: 'assistant', content: 'a' } }, 7] }, 'left as it came');
  const counted = normalizeCompletion({ choices: [], usage: { prompt_tokens: '3', completion_tokens: 4, total_tokens: 99 } } as unknown as ChatCompletion, 'm', 1);
  t.deepEqual(counted.usage, { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 });
});
