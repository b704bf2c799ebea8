import test from 'ava';
import { ManualClock, type Principal } from '../../services/kit/index.js';
import { createLlmPort } from '../../services/response-api/responses/ports.js';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.js';
import { startLlmHarness, type LlmHarness } from '../fakes/llm-harness.js';
import { createTestUser } from '../helpers/users.js';

// response-api's client of llm-api, against a real llm-api: the model's context window is read
// from llm-api's model entry and reused for RESPONSES_MODEL_CACHE_MS by the clock; a conversation
// is read newest first, page by page, as far as the caller iterates; a turn is appended to it whole
// or not at all, however many items it has.
let h: LlmHarness;
let fake: FakeUpstream;
let principal: Principal;

test.before(async () => {
  fake = await startFakeUpstream({ name: 'port', models: [{ id: 'org/windowed' }, { id: 'unbounded' }] });
  h = await startLlmHarness();
  await h.call('POST', '/v1/admin/providers', { name: 'Port', vendor: 'fake', base_url: fake.url });
  principal = { userId: h.user.id, subject: h.user.id, email: h.user.email, username: h.user.username, authMethod: 'apikey', isAdmin: false, isGuest: false };
});
test.after.always(async () => {
  await h?.close();
  await fake?.close();
});

const setContext = async (model: string, contextLength: number) => {
  const pms = (await h.call('GET', '/v1/admin/models/provider-models')).body.data;
  const pm = pms.find((m: any) => m.model_public_id === model);
  const patched = await h.call('PATCH', `/v1/admin/models/provider-models/${pm.id}`, { token_limits: { context_length: contextLength } });
  if (patched.status !== 200) throw new Error(`patch: ${patched.status}`);
};

test.serial('the context window is reused until the cache time has passed, by the clock', async (t) => {
  const clock = new ManualClock(1_000_000);
  const port = createLlmPort({ baseUrl: () => h.url, gatewayToken: h.service.gatewaySecret, timeoutMs: 10_000, clock, modelCacheMs: 30_000 });
  const signal = new AbortController().signal;
  await setContext('org/windowed', 1000);
  t.is(await port.contextLength(principal, 'org/windowed', signal), 1000, 'a model id with a slash');
  t.is(await port.contextLength(principal, 'unbounded', signal), null);
  await setContext('org/windowed', 2000);
  clock.advance(29_999);
  t.is(await port.contextLength(principal, 'org/windowed', signal), 1000, 'still the cached window');
  clock.advance(1);
  t.is(await port.contextLength(principal, 'org/windowed', signal), 2000, 'read again once the cache time has passed');
  const missing: any = await t.throwsAsync(port.contextLength(principal, 'no-such-model', signal));
  t.is(missing.status, 404);

  const uncached = createLlmPort({ baseUrl: () => h.url, gatewayToken: h.service.gatewaySecret, timeoutMs: 10_000, clock, modelCacheMs: 0 });
  t.is(await uncached.contextLength(principal, 'org/windowed', signal), 2000);
  await setContext('org/windowed', 3000);
  t.is(await uncached.contextLength(principal, 'org/windowed', signal), 3000, '0 reads it for every response');
  await Promise.all([port.close(), uncached.close()]);
});

test.serial("a model's access is the caller's own: a window another user's lookup cached does not answer a user the model is not allowed to", async (t) => {
  const clock = new ManualClock(1_000_000);
  const port = createLlmPort({ baseUrl: () => h.url, gatewayToken: h.service.gatewaySecret, timeoutMs: 10_000, clock, modelCacheMs: 30_000 });
  const signal = new AbortController().signal;
  const restricted = await createTestUser(h.service.runtime.db.knex);
  const patched = await h.call('PATCH', `/v1/admin/users/${restricted.id}`, { allowed_models: ['unbounded'] });
  t.is(patched.status, 200);
  const other: Principal = { userId: restricted.id, subject: restricted.id, email: restricted.email, username: restricted.username, authMethod: 'apikey', isAdmin: false, isGuest: false };
  const cold: any = await t.throwsAsync(port.contextLength(other, 'org/windowed', signal));
  t.is(cold.status, 404, 'refused on a cold cache');
  await setContext('org/windowed', 1000);
  t.is(await port.contextLength(principal, 'org/windowed', signal), 1000, 'a user with access warms the cache');
  const warm: any = await t.throwsAsync(port.contextLength(other, 'org/windowed', signal));
  t.is(warm.status, 404, 'still refused once the cache is warm');
  t.is(warm.param, cold.param);
  t.is(warm.code, cold.code);
  t.is(await port.contextLength(other, 'unbounded', signal), null, 'a model of its allow-list is answered');
  await port.close();
});

test.serial('a conversation is read newest first, a page of 100 at a time, no further than the caller goes', async (t) => {
  const port = createLlmPort({ baseUrl: () => h.url, gatewayToken: h.service.gatewaySecret, timeoutMs: 10_000, clock: new ManualClock(), modelCacheMs: 0 });
  const conversation = (await h.call('POST', '/v1/conversations', {}, h.user)).body.id;
  for (let i = 0; i < 250; i += 20) {
    const items = Array.from({ length: Math.min(20, 250 - i) }, (_, k) => ({ type: 'message', role: 'user', content: `m${i + k}` }));
    t.is((await h.call('POST', `/v1/conversations/${conversation}/items`, { items }, h.user)).status, 200);
  }
  // Statements that read the branch's item references, counted on llm-api's database.
  let reads = 0;
  const onQuery = (query: { sql: string }) => void (query.sql.includes('"branch_items"') && reads++);
  h.service.runtime.db.knex.on('query', onQuery);
  const readUpTo = async (count: number) => {
    reads = 0;
    const texts: string[] = [];
    for await (const item of port.conversationHistory(principal, conversation)) {
      texts.push(item.content[0].text);
      if (texts.length === count) break;
    }
    return { texts, reads };
  };
  const onePage = await readUpTo(50);
  const twoPages = await readUpTo(120);
  const all = await readUpTo(Number.POSITIVE_INFINITY);
  h.service.runtime.db.knex.off('query', onQuery);
  t.deepEqual(twoPages.texts, Array.from({ length: 120 }, (_, k) => `m${249 - k}`));
  t.deepEqual(all.texts, Array.from({ length: 250 }, (_, k) => `m${249 - k}`));
  t.true(twoPages.reads > onePage.reads && onePage.reads > 0);
  t.is(all.reads - twoPages.reads, twoPages.reads - onePage.reads, 'the third page is read only by the caller that goes on');
  await port.close();
});

// A Responses turn, as response-api stores it, of `count` user messages.
const storedTurn = (count: number, text = (i: number) => `turn ${i}`) =>
  Array.from({ length: count }, (_, i) => ({ id: `msg_${i}`, type: 'message', role: 'user', status: 'completed', content: [{ type: 'input_text', text: text(i) }] }));
const conversationTexts = async (conversation: string) =>
  (await h.call('GET', `/v1/conversations/${conversation}/items?order=asc&limit=100`, undefined, h.user)).body.data.map((item: any) => item.content[0].text);

test.serial('a turn of more than 20 items is appended whole, in one request and one transaction', async (t) => {
  const port = createLlmPort({ baseUrl: () => h.url, gatewayToken: h.service.gatewaySecret, timeoutMs: 10_000, clock: new ManualClock(), modelCacheMs: 0 });
  const conversation = (await h.call('POST', '/v1/conversations', {}, h.user)).body.id;
  // Inserts of items, counted on llm-api's database: one per transaction that appends.
  let inserts = 0;
  const onQuery = (query: { method: string; sql: string }) => void (query.method === 'insert' && query.sql.includes('"conversation_items"') && inserts++);
  h.service.runtime.db.knex.on('query', onQuery);
  try {
    await port.appendConversationItems(principal, conversation, storedTurn(45));
  } finally {
    h.service.runtime.db.knex.off('query', onQuery);
    await port.close();
  }
  t.is(inserts, 1);
  t.deepEqual(await conversationTexts(conversation), Array.from({ length: 45 }, (_, i) => `turn ${i}`));
});

test.serial('a turn that fails part-way leaves none of its items in the conversation: a refused item past the 20th, a fault', async (t) => {
  const port = createLlmPort({ baseUrl: () => h.url, gatewayToken: h.service.gatewaySecret, timeoutMs: 10_000, clock: new ManualClock(), modelCacheMs: 0 });
  const knex = h.service.runtime.db.knex;
  const conversation = (await h.call('POST', '/v1/conversations', {}, h.user)).body.id;
  await port.appendConversationItems(principal, conversation, storedTurn(2, (i) => `before ${i}`));

  // llm-api refuses the 26th item (a role its store does not take): the turn is refused whole.
  const refused = storedTurn(40);
  refused[25]!.role = 'robot';
  const refusal: any = await t.throwsAsync(port.appendConversationItems(principal, conversation, refused));
  t.is(refusal.status, 400);
  t.is(refusal.param, 'items[25].role');

  // A fault inside llm-api's transaction, after the items and their places on the branch were
  // written: the database refuses the event of the 30th item (a trigger of this test's schema).
  const fn = `llm_port_fault_${Date.now()}`;
  await knex.raw(`create function ${fn}() returns trigger language plpgsql as $$ begin if new.data::text like '%#fault-here%' then raise exception 'injected fault'; end if; return new; end $$`);
  await knex.raw(`create trigger ${fn} before insert on outbox_events for each row execute function ${fn}()`);
  try {
    const faulty = storedTurn(40, (i) => (i === 29 ? 'turn 29 #fault-here' : `turn ${i}`));
    const fault: any = await t.throwsAsync(port.appendConversationItems(principal, conversation, faulty));
    t.true(fault.status >= 500, `→ ${fault.status}`);
  } finally {
    await knex.raw(`drop trigger ${fn} on outbox_events`);
    await knex.raw(`drop function ${fn}()`);
    await port.close();
  }
  t.deepEqual(await conversationTexts(conversation), ['before 0', 'before 1'], 'only the earlier turn');
});

// A step's completion, streamed (a streaming caller's steps) and whole, through llm-api from the
// fake provider: tool calls assembled by the rule llm-api's relay uses, refusals carried.
const stepOf = async (script: string, streamed: boolean) => {
  const port = createLlmPort({ baseUrl: () => h.url, gatewayToken: h.service.gatewaySecret, timeoutMs: 10_000, clock: new ManualClock(), modelCacheMs: 0 });
  const texts: string[] = [];
  const refusals: string[] = [];
  const onDelta = streamed ? { text: (d: string) => void texts.push(d), refusal: (d: string) => void refusals.push(d) } : undefined;
  try {
    const body = { model: 'unbounded', messages: [{ role: 'user', content: `go #script:${script}` }] };
    const completion = await port.complete(principal, body, new AbortController().signal, onDelta);
    return { completion, texts, refusals };
  } finally {
    await port.close();
  }
};

test('streamed tool calls without an index, their name in every delta: one call each, the name as given', async (t) => {
  fake.script('indexless', [
    {
      indexlessToolCalls: true,
      tool_calls: [
        { name: 'get_a', arguments: { x: 1 } },
        { name: 'get_b', arguments: { y: 2 } },
      ],
    },
  ]);
  const { completion } = await stepOf('indexless', true);
  const [choice] = completion.choices;
  t.is(choice!.finish_reason, 'tool_calls');
  t.deepEqual(
    choice!.message.tool_calls!.map((c) => ({ id: c.id, name: c.function.name, arguments: c.function.arguments })),
    [
      { id: 'call_indexless_0_0', name: 'get_a', arguments: '{"x":1}' },
      { id: 'call_indexless_0_1', name: 'get_b', arguments: '{"y":2}' },
    ],
  );
});

test('a refusal is carried by a step, streamed (each piece handed over as it arrives) and whole', async (t) => {
  const refusal = "I'm sorry, I can't help with that.";
  fake.script('refusing-port', [{ refusal }]);
  const streamed = await stepOf('refusing-port', true);
  t.is(streamed.completion.choices[0]!.message.refusal, refusal);
  t.is(streamed.completion.choices[0]!.message.content, '');
  t.true(streamed.refusals.length > 1, 'the pieces as the provider wrote them');
  t.is(streamed.refusals.join(''), refusal);
  t.deepEqual(streamed.texts, []);
  const whole = await stepOf('refusing-port', false);
  t.is(whole.completion.choices[0]!.message.refusal, refusal);
  t.falsy(whole.completion.choices[0]!.message.content);
});

test("a streamed step is read no further while the caller's connection is full; a step aborted meanwhile ends at once", async (t) => {
  t.timeout(10_000);
  fake.script('full-port', [{ content: 'one two three four' }]);
  const port = createLlmPort({ baseUrl: () => h.url, gatewayToken: h.service.gatewaySecret, timeoutMs: 10_000, clock: new ManualClock(), modelCacheMs: 0 });
  const texts: string[] = [];
  let connectionFull!: () => void;
  const full = new Promise<void>((resolve) => (connectionFull = resolve));
  const stuck = new Promise<void>(() => {}); // a client that never reads again
  const onDelta = {
    text: (d: string) => void texts.push(d),
    refusal: () => {},
    drained: () => {
      if (texts.length === 0) return null;
      connectionFull();
      return stuck;
    },
  };
  const abort = new AbortController();
  try {
    const body = { model: 'unbounded', messages: [{ role: 'user', content: 'go #script:full-port' }] };
    const step = port.complete(principal, body, abort.signal, onDelta);
    await full;
    abort.abort(new Error('cancelled while the client was full'));
    await t.throwsAsync(step, { message: 'cancelled while the client was full' });
    t.is(texts.length, 1, 'nothing was read past the first piece while the connection was full');
    t.is(texts[0]!.trim(), 'one');
  } finally {
    await port.close();
  }
});
