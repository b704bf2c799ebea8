import test from 'ava';
import OpenAI, { APIError, AuthenticationError, BadRequestError, NotFoundError, PermissionDeniedError, RateLimitError } from 'openai';
import { randomBase62 } from '../../../services/kit/index.js';
import { startFakeUpstream, type FakeUpstream } from '../../fakes/openai-upstream.js';
import { startTestPlatform, type TestPlatform } from '../../helpers/platform.js';
import { waitFor } from '../../helpers/wait.js';

// The official openai SDK pointed at the EDGE (embedded gateway + deck/kong.yaml), changing only
// baseURL and the credential: a guest token from /llm/auth/guest-login; the admin uses the
// bootstrap API key. The fake provider is registered through the admin API.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
let p: TestPlatform;
let fake: FakeUpstream;
let limited: FakeUpstream;
let client: OpenAI;
let admin: OpenAI;

test.before(async () => {
  fake = await startFakeUpstream({ name: 'edge', models: [{ id: 'edge-model' }] });
  limited = await startFakeUpstream({ name: 'limited', models: [{ id: 'limited-model' }] });
  p = await startTestPlatform({ env: { BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY, LLM_HEALTH_PROBE_INTERVAL_MS: '0' } });
  admin = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: 'unused', maxRetries: 0, defaultHeaders: { 'X-API-Key': ADMIN_KEY, Authorization: null } });
  await admin.post('/admin/providers', { body: { name: 'Edge', vendor: 'fake', base_url: fake.url } });
  await admin.post('/admin/providers', { body: { name: 'Limited', vendor: 'fake', base_url: limited.url } });
  limited.failAll(429, { retryAfter: '1' });
  const login = await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' });
  const token = ((await login.json()) as { access_token: string }).access_token;
  client = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: token, maxRetries: 0 });
});
test.after.always(async () => {
  await p?.stop();
  await fake?.close();
  await limited?.close();
});

test('models.list and models.retrieve through the edge', async (t) => {
  const ids: string[] = [];
  for await (const m of client.models.list()) ids.push(m.id);
  t.true(ids.includes('edge-model'));
  t.is((await client.models.retrieve('edge-model')).id, 'edge-model');
  const llm = new OpenAI({ baseURL: `${p.url}/llm/v1`, apiKey: client.apiKey, maxRetries: 0 });
  t.is((await llm.models.retrieve('edge-model')).owned_by, 'edge');
});

test('chat.completions.create non-stream and stream (include_usage, tool calls, n > 1)', async (t) => {
  const plain = await client.chat.completions.create({ model: 'edge-model', messages: [{ role: 'user', content: 'hi' }] });
  t.is(plain.choices[0]!.message.content, 'Hello from edge w1 w2 w3 w4');
  t.is(plain.choices[0]!.message.refusal, null);

  const stream = await client.chat.completions.create({ model: 'edge-model', messages: [{ role: 'user', content: 'hi' }], stream: true, stream_options: { include_usage: true } });
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  t.is(chunks.map((c) => c.choices[0]?.delta.content ?? '').join(''), 'Hello from edge w1 w2 w3 w4');
  t.deepEqual(chunks.at(-1)!.choices, []);
  t.truthy(chunks.at(-1)!.usage);

  const raw = await (await client.chat.completions.create({ model: 'edge-model', messages: [{ role: 'user', content: 'hi' }], stream: true }).asResponse()).text();
  t.true(raw.endsWith('data: [DONE]\n\n'));

  const tools = [{ type: 'function' as const, function: { name: 'lookup', parameters: { type: 'object' } } }];
  const final = await client.chat.completions.stream({ model: 'edge-model', messages: [{ role: 'user', content: 'tools' }], tools }).finalChatCompletion();
  t.is((final.choices[0]!.message.tool_calls![0] as any).function.name, 'lookup');
  t.deepEqual(JSON.parse((final.choices[0]!.message.tool_calls![0] as any).function.arguments), { q: 'x', i: 0 });

  const many = await client.chat.completions.stream({ model: 'edge-model', messages: [{ role: 'user', content: 'n' }], n: 2 }).finalChatCompletion();
  t.is(many.choices.length, 2);
  const manyPlain = await client.chat.completions.create({ model: 'edge-model', messages: [{ role: 'user', content: 'n' }], n: 3 });
  t.is(manyPlain.choices.length, 3);
});

test('error classes through the edge: 401, 403, 404 model_not_found, 400 with param, 429', async (t) => {
  const stranger = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: 'not-a-valid-token', maxRetries: 0 });
  await t.throwsAsync(stranger.models.list(), { instanceOf: AuthenticationError });
  await t.throwsAsync(client.get('/admin/providers'), { instanceOf: PermissionDeniedError });
  const missing = await t.throwsAsync(client.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }), { instanceOf: NotFoundError });
  t.is((missing as APIError).code, 'model_not_found');
  const bad = await t.throwsAsync(client.chat.completions.create({ model: 'edge-model', messages: [{ role: 'user', content: 'x' }], top_logprobs: 3 }), { instanceOf: BadRequestError });
  t.is((bad as APIError).param, 'top_logprobs');
  t.truthy((bad as APIError).requestID);
  await t.throwsAsync(client.chat.completions.create({ model: 'limited-model', messages: [{ role: 'user', content: 'x' }] }), { instanceOf: RateLimitError });
});

test('store: true end to end: the exchange lands in the conversation (read back with the SDK) and emits message.sent', async (t) => {
  const conversation = await client.conversations.create({ metadata: { topic: 'e2e' } });
  const res: any = await client.chat.completions.create({ model: 'edge-model', messages: [{ role: 'user', content: 'remember this' }], store: true, conversation: conversation.id } as any);
  t.is(res.conversation.id, conversation.id);
  const items: any[] = [];
  for await (const item of client.conversations.items.list(conversation.id, { order: 'asc' })) items.push(item);
  t.deepEqual(items.map((i) => i.role), ['user', 'assistant']);
  t.is(items[1].content[0].text, 'Hello from edge w1 w2 w3 w4');
  const sent = await p.runtime.db.knex('outbox_events').where({ type: 'message.sent' }).whereRaw("data->>'conversation_id' = ?", [conversation.id]);
  t.is(sent.length, 2);
  // The next turn sees the stored history.
  const next: any = await client.chat.completions.create({ model: 'edge-model', messages: [{ role: 'user', content: 'and now?' }], store: true, conversation: { id: conversation.id } } as any);
  t.is(next.usage.prompt_tokens, 'remember this'.split(' ').length + 'Hello from edge w1 w2 w3 w4'.split(' ').length + 2);
});

test('usage is attributed to the API key the edge verified; a client cannot forge the key id', async (t) => {
  const forged = { 'X-User-Key-ID': 'key_forged', 'X-API-Key-ID': 'key_forged' };
  await admin.chat.completions.create({ model: 'edge-model', messages: [{ role: 'user', content: 'by key' }], metadata: { probe: 'key' } }, { headers: forged });
  await client.chat.completions.create({ model: 'edge-model', messages: [{ role: 'user', content: 'by token' }], metadata: { probe: 'token' } }, { headers: forged });
  const bootstrapKey = await p.runtime.db.knex('identity_api_keys').where({ user_id: (await p.runtime.db.knex('users').where({ is_admin: true }).first()).id }).first();
  const rows = await waitFor(async () => {
    const found = await p.runtime.db.knex('llm_usage').whereRaw("metadata->>'probe' in ('key', 'token')").select('metadata', 'api_key_id', 'auth_method');
    return found.length === 2 ? found : null;
  }, 15_000, 'usage rows');
  const byProbe = Object.fromEntries(rows.map((r: { metadata: { probe: string }; api_key_id: string | null; auth_method: string }) => [r.metadata.probe, r]));
  t.is(byProbe.key.auth_method, 'apikey');
  t.is(byProbe.key.api_key_id, bootstrapKey.id);
  t.regex(String(byProbe.key.api_key_id), /^key_/);
  t.is(byProbe.token.auth_method, 'jwt');
  t.is(byProbe.token.api_key_id, null);
});
