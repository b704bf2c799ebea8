import test from 'ava';
import OpenAI, { APIError, BadRequestError, InternalServerError } from 'openai';
import { ManualClock } from '../../../services/kit/index.js';
import { createDispatcher } from '../../../services/llm-api/chat/dispatch.js';
import { EndpointHealth } from '../../../services/llm-api/routing/health.js';
import { planAttempts } from '../../../services/llm-api/routing/failover.js';
import { seededRandom } from '../../../services/llm-api/routing/select.js';
import { createUpstream } from '../../../services/llm-api/routing/upstream.js';
import { startHostileUpstream, type HostileUpstream } from '../../fakes/hostile-upstream.js';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';
import { waitFor } from '../../helpers/wait.js';

// A provider that echoes its request and its Authorization header, splits its stream at every byte,
// sends oversized events and answers, or drips forever: what reaches the client stays ours.
const PROVIDER_KEY = 'sk-provider-SECRET-0123456789abcdef';
let h: LlmHarness;
let hostile: HostileUpstream;
let client: OpenAI;
let providerId: string;

test.before(async () => {
  hostile = await startHostileUpstream({ models: ['hostile-model'] });
  h = await startLlmHarness({
    LLM_CHAT_BODY_LIMIT: '64kb',
    LLM_SSE_MAX_EVENT_BYTES: '256kb',
    LLM_MAX_RESPONSE_BYTES: '256kb',
    LLM_COMPLETION_MAX_DURATION_MS: '3000',
    LLM_HEALTH_FAILURE_THRESHOLD: '2',
    LLM_HEALTH_COOLDOWN_MS: '600000',
  });
  const reg = await h.call('POST', '/v1/admin/providers', { name: 'Hostile', vendor: 'fake', base_url: hostile.url, api_key: PROVIDER_KEY });
  providerId = reg.body.id;
  client = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: 'unused', maxRetries: 0, defaultHeaders: h.headers(h.user) });
});
test.after.always(async () => {
  await h?.close();
  await hostile?.close();
});

const ask = (content: string, extra: Record<string, unknown> = {}) =>
  h.call('POST', '/v1/chat/completions', { model: 'hostile-model', messages: [{ role: 'user', content }], ...extra }, h.user);
const leaks = (text: string) => text.includes('SECRET') || text.includes(hostile.host) || text.includes('internal-node') || text.includes('got_headers');
const endpointsHealthy = async () => (await h.call('GET', `/v1/admin/providers/${providerId}`)).body.endpoints.map((e: { healthy: boolean }) => e.healthy);

test.serial('an echoing upstream: clients get our message, the upstream status and a neutral code, never its text', async (t) => {
  for (const [directive, status, code] of [
    ['#echo:400', 400, 'upstream_invalid_request'],
    ['#echo:422', 400, 'upstream_invalid_request'],
    ['#echo:401', 502, 'upstream_error'],
    ['#echo:403', 502, 'upstream_error'],
    ['#echo:500', 502, 'upstream_error'],
    ['#echotext:503', 502, 'upstream_error'],
    ['#echotext:400', 400, 'upstream_invalid_request'],
  ] as const) {
    for (const stream of [false, true]) {
      const res = await ask(`please ${directive}`, { stream });
      const text = JSON.stringify(res.body);
      t.is(res.status, status, `${directive} stream=${stream}`);
      t.is(res.body.error.code, code, directive);
      t.is(res.body.error.param, null, directive);
      t.regex(res.body.error.message, new RegExp(`upstream status ${directive.split(':')[1]}`));
      t.false(leaks(text), `${directive}: ${text}`);
    }
  }
});

test.serial('known OpenAI 400 codes map through with their param, without the provider text', async (t) => {
  const error = await t.throwsAsync(client.chat.completions.create({ model: 'hostile-model', messages: [{ role: 'user', content: 'long #context' }] }), { instanceOf: BadRequestError });
  t.is((error as APIError).code, 'context_length_exceeded');
  t.is((error as APIError).param, 'messages');
  t.regex((error as APIError).message, /context window/);
  t.false(leaks(JSON.stringify((error as APIError).error)));
});

test.serial('an error event inside the stream is replaced by ours (internal_error), nothing of the provider text; no retry after the first byte', async (t) => {
  const before = hostile.chatCount();
  const raw = await (await client.chat.completions.create({ model: 'hostile-model', messages: [{ role: 'user', content: '#echostream' }], stream: true }).asResponse()).text();
  const events = raw.split('\n\n').filter(Boolean);
  const last = JSON.parse(events.at(-1)!.slice(6));
  t.like(last.error, { type: 'internal_error', code: 'upstream_error', param: null });
  t.truthy(last.error.request_id);
  t.false(raw.includes('[DONE]'));
  t.false(leaks(raw), raw);
  t.is(hostile.chatCount(), before + 1);
});

test.serial("a provider's body that ends inside an event: the SDK gets the text before it, then an APIError (our error event), not a JSON syntax error", async (t) => {
  const stream = await client.chat.completions.create({ model: 'hostile-model', messages: [{ role: 'user', content: '#cutevent' }], stream: true });
  let content = '';
  const error = await t.throwsAsync(async () => {
    for await (const chunk of stream) content += chunk.choices[0]?.delta.content ?? '';
  });
  t.true(error instanceof APIError, String(error));
  t.is(content, 'Hello');
  const raw = await (await client.chat.completions.create({ model: 'hostile-model', messages: [{ role: 'user', content: '#cutevent' }], stream: true }).asResponse()).text();
  const events = raw.split('\n\n').filter(Boolean);
  t.is(events.length, 2);
  t.like(JSON.parse(events[1]!.slice(6)).error, { type: 'internal_error', code: 'upstream_error', message: 'The model provider failed during the stream' });
  t.false(raw.includes('[DONE]'));
});

test.serial('a stream split at every byte with CRLF line ends: each two-line event stays one event', async (t) => {
  const before = hostile.chatCount();
  const stream = await client.chat.completions.create({ model: 'hostile-model', messages: [{ role: 'user', content: '#bytes' }], stream: true });
  let content = '';
  for await (const chunk of stream) content += chunk.choices[0]?.delta.content ?? '';
  t.is(content, 'Hello one two three');
  t.is(hostile.chatCount(), before + 1);
  const raw = await (await client.chat.completions.create({ model: 'hostile-model', messages: [{ role: 'user', content: '#bytes' }], stream: true }).asResponse()).text();
  const events = raw.split('\n\n').filter(Boolean);
  t.is(events.length, 5);
  t.is(events.filter((e) => e.split('\n').length === 2).length, 3);
  t.true(raw.endsWith('data: [DONE]\n\n'));
});

test.serial('events without data (event: ping, id, retry) are dropped, comments pass: the SDK reads the stream to its end', async (t) => {
  const stream = await client.chat.completions.create({ model: 'hostile-model', messages: [{ role: 'user', content: '#fields' }], stream: true });
  let content = '';
  for await (const chunk of stream) content += chunk.choices[0]?.delta.content ?? '';
  t.is(content, 'Hello one two');
  const raw = await (await client.chat.completions.create({ model: 'hostile-model', messages: [{ role: 'user', content: '#fields' }], stream: true }).asResponse()).text();
  const events = raw.split('\n\n').filter(Boolean);
  t.false(events.some((e) => !e.includes('data:') && !e.startsWith(':')), 'no event without data reaches the client');
  t.true(events.includes(': keep-alive'));
  t.true(raw.endsWith('data: [DONE]\n\n'));
});

test.serial('include_usage from a provider that sends no usage: the SDK still reads the usage chunk (choices: []) last, before [DONE]', async (t) => {
  const stream = await client.chat.completions.create({ model: 'hostile-model', messages: [{ role: 'user', content: 'count me' }], stream: true, stream_options: { include_usage: true } });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  t.is(chunks.map((c) => c.choices[0]?.delta.content ?? '').join(''), 'Hello world');
  const last = chunks.at(-1)!;
  t.deepEqual(last.choices, []);
  t.like(last, { id: 'chatcmpl-h', object: 'chat.completion.chunk', created: 1, model: 'hostile-model' });
  t.true(last.usage!.prompt_tokens > 0);
  t.true(last.usage!.completion_tokens > 0);
  t.is(last.usage!.total_tokens, last.usage!.prompt_tokens + last.usage!.completion_tokens);
  t.is(chunks.filter((c) => c.usage).length, 1);
  const raw = await (await client.chat.completions.create({ model: 'hostile-model', messages: [{ role: 'user', content: 'count me' }], stream: true, stream_options: { include_usage: true } }).asResponse()).text();
  const events = raw.split('\n\n').filter(Boolean);
  t.is(events.at(-1), 'data: [DONE]');
  t.like(JSON.parse(events.at(-2)!.slice(6)), { object: 'chat.completion.chunk', choices: [] });
});

test.serial('an event over LLM_SSE_MAX_EVENT_BYTES cuts the upstream; the client gets a clear error event', async (t) => {
  const cutBefore = hostile.cut();
  const raw = await (await client.chat.completions.create({ model: 'hostile-model', messages: [{ role: 'user', content: '#bigevent:8000000' }], stream: true }).asResponse()).text();
  const last = JSON.parse(raw.split('\n\n').filter(Boolean).at(-1)!.slice(6));
  t.like(last.error, { type: 'internal_error', code: 'upstream_response_too_large' });
  t.regex(last.error.message, /larger than the limit of 262144 bytes/);
  t.true(raw.length < 300_000);
  t.true(await waitFor(async () => hostile.cut() > cutBefore || null, 5000, 'upstream cut'));
});

test.serial('a non-stream answer over LLM_MAX_RESPONSE_BYTES is a 502; under it passes', async (t) => {
  const error = await t.throwsAsync(client.chat.completions.create({ model: 'hostile-model', messages: [{ role: 'user', content: '#biganswer:1000000' }] }), { instanceOf: InternalServerError });
  t.is((error as APIError).status, 502);
  t.is((error as APIError).code, 'upstream_response_too_large');
  const fine = await client.chat.completions.create({ model: 'hostile-model', messages: [{ role: 'user', content: '#biganswer:1000' }] });
  t.is(fine.choices[0]!.message.content!.length, 1000);
});

test.serial('an upstream error body is read only up to LLM_UPSTREAM_ERROR_MAX_BYTES: the rest is cut, the client gets our 502', async (t) => {
  const cutBefore = hostile.cut();
  const res = await ask('#hugeerror:200000000');
  t.is(res.status, 502);
  t.is(res.body.error.message, 'The model provider failed (upstream status 500)');
  t.true(await waitFor(async () => hostile.cut() > cutBefore || null, 5000, 'upstream cut'));
});

test.serial('a stream that drips past LLM_COMPLETION_MAX_DURATION_MS ends with a 504-typed error event and the upstream is cut', async (t) => {
  const cutBefore = hostile.cut();
  const raw = await (await client.chat.completions.create({ model: 'hostile-model', messages: [{ role: 'user', content: '#drip:50' }], stream: true }).asResponse()).text();
  const last = JSON.parse(raw.split('\n\n').filter(Boolean).at(-1)!.slice(6));
  t.like(last.error, { type: 'internal_error', code: 'upstream_timeout' });
  t.true(raw.includes(' drop'));
  t.false(raw.includes('[DONE]'));
  await waitFor(async () => hostile.cut() > cutBefore || null, 5000, 'upstream cut');
  const rows = await waitFor(async () => {
    const found = await h.service.runtime.db.knex('llm_usage').where({ outcome: 'deadline' });
    return found.length > 0 ? found : null;
  }, 5000, 'usage row');
  t.is(rows[0].status, 504);
});

test.serial('a request that cannot be encoded for the provider (JSON nested 5,000 deep) is a 400; no provider is contacted or marked', async (t) => {
  const before = hostile.chatCount();
  // Built as text: serialising it here would overflow this stack too.
  const body = `{"model":"hostile-model","messages":[{"role":"user","content":"deep"}],"guided_json":${'['.repeat(5000)}"x"${']'.repeat(5000)}}`;
  for (let i = 0; i < 3; i++) {
    const res = await fetch(`${h.url}/v1/chat/completions`, { method: 'POST', headers: { ...h.headers(h.user), 'content-type': 'application/json' }, body });
    t.is(res.status, 400);
    t.is(((await res.json()) as { error: { type: string } }).error.type, 'invalid_request_error');
  }
  t.is(hostile.chatCount(), before);
  t.deepEqual(await endpointsHealthy(), [true]);
  t.is((await ask('still fine')).status, 200);
});

test.serial('the chat body limit comes from validated config (LLM_CHAT_BODY_LIMIT), not the general JSON limit', async (t) => {
  const big = await ask('x'.repeat(100 * 1024));
  t.is(big.status, 413);
  t.is(big.body.error.code, 'payload_too_large');
  t.is((await ask('y'.repeat(32 * 1024))).status, 200);
});

test('the failure log names the provider and the endpoint, with the upstream body redacted', async (t) => {
  const lines: Array<{ fields: Record<string, unknown>; message: string }> = [];
  const upstream = createUpstream({ connections: 4, connectTimeoutMs: 1000, headersTimeoutMs: 2000, bodyTimeoutMs: 2000 });
  t.teardown(() => upstream.close());
  const health = new EndpointHealth({ threshold: 1, cooldownMs: 1000, clock: new ManualClock() });
  const dispatcher = createDispatcher({
    upstream,
    health,
    random: seededRandom(1),
    logger: { warn: (fields: Record<string, unknown>, message: string) => void lines.push({ fields, message }) } as never,
    errorBodyMaxBytes: 64 * 1024,
    knownFields: new Set(['messages']),
  });
  const candidate = {
    pm: { id: 'pmdl_1', provider_id: 'prov_h', provider_original_model_id: 'hostile-model' },
    provider: { row: { id: 'prov_h', name: 'Hostile' }, apiKey: PROVIDER_KEY, endpoints: [{ url: hostile.url, priority: 0, weight: 1, healthy: true }] },
  } as never;
  const attempts = planAttempts([candidate], health, seededRandom(1));
  const body = JSON.stringify({ model: 'hostile-model', messages: [{ role: 'user', content: '#echo:500' }] });
  await t.throwsAsync(dispatcher.json(attempts, { bodies: new Map([['hostile-model', body]]), requestId: 'req_log', signal: new AbortController().signal }));
  t.is(lines.length, 1);
  const [line] = lines;
  t.is(line!.fields.provider, 'Hostile');
  t.is(line!.fields.provider_id, 'prov_h');
  t.is(line!.fields.endpoint, hostile.url);
  t.is(line!.fields.upstream_status, 500);
  t.regex(line!.message, /provider Hostile, endpoint http:\/\/127\.0\.0\.1/);
  const logged = JSON.stringify(line);
  t.true(logged.includes('got_headers'), 'the body is logged');
  t.false(logged.includes('SECRET'), logged);
  t.false(logged.includes(PROVIDER_KEY));
});
