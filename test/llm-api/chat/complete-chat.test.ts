import { Readable } from 'node:stream';
import test from 'ava';
import { ApiError, ManualClock, scanJsonMembers, type Principal } from '../../../services/kit/index.js';
import { completeChat, type ChatDeps, type ConversationSessions, type MessageStep, type StoredAnswer } from '../../../services/llm-api/chat/completions.js';
import { defaultChatLimits } from '../../../services/llm-api/chat/config.js';
import type { ChatDispatcher } from '../../../services/llm-api/chat/dispatch.js';
import { FORWARDED_MEMBERS, type ChatRequest } from '../../../services/llm-api/chat/schemas.js';
import type { StreamEvent } from '../../../services/llm-api/chat/stream.js';
import type { UsageRecord } from '../../../services/llm-api/usage/recorder.js';
import { createUsageMeters } from '../../../services/llm-api/usage/meter.js';
import { answerFrom } from '../../helpers/provider-answer.js';

// The domain function with narrow fakes: no HTTP server, no database.
const principal: Principal = { userId: 'user_1', subject: 'user_1', email: null, username: null, authMethod: 'jwt', isAdmin: false, isGuest: false };
const candidate = {
  pm: { id: 'pmdl_1', provider_id: 'prov_1', provider_original_model_id: 'up-model', model_public_id: 'm', pricing: { lines: [] }, supports_reasoning: false },
  provider: { row: { id: 'prov_1', name: 'P' }, apiKey: null, endpoints: [{ url: 'http://p/v1', priority: 0, weight: 1, healthy: true }] },
};
const model = { publicId: 'm', catalog: { supports_reasoning: false }, candidates: [candidate] };

/** A dispatcher whose upstream answers with the given body (JSON) or SSE text. */
function fakeDispatcher(answer: { json?: unknown; sse?: string }, seen: { bodies: string[] }): ChatDispatcher {
  const attempt = { candidate, endpoint: candidate.provider.endpoints[0]! } as never;
  return {
    plan: () => [attempt],
    async json(_attempts, request) {
      seen.bodies.push(request.bodies.get('up-model')!.toString());
      const text = JSON.stringify(answer.json);
      return { value: answerFrom(Readable.from([Buffer.from(text)])), attempt, tries: 1 };
    },
    async stream(_attempts, request) {
      seen.bodies.push(request.bodies.get('up-model')!.toString());
      const bytes = Buffer.from(answer.sse!);
      const rest = answerFrom(Readable.from((function* () { for (let i = 1; i < bytes.length; i++) yield bytes.subarray(i, i + 1); })(), { objectMode: false }));
      return { value: { firstChunk: bytes.subarray(0, 1), rest }, attempt, tries: 1 };
    },
    logStreamFailure() {},
  };
}

function deps(dispatcher: ChatDispatcher, records: UsageRecord[], messageSteps: MessageStep[] = []): ChatDeps {
  const clock = new ManualClock(1_700_000_000_000);
  return {
    registry: { resolve: (id) => (id === 'm' ? (model as never) : undefined) },
    dispatcher,
    usage: createUsageMeters({ recorder: { record: (r) => void records.push(r) }, clock }),
    clock,
    limits: defaultChatLimits,
    messageSteps,
    logger: { error() {} },
  };
}
const request = (extra: Partial<ChatRequest> = {}): ChatRequest => ({ model: 'm', messages: [{ role: 'user', content: 'hi' }], ...extra }) as ChatRequest;

test('a request that cannot be encoded (nested 5,000 deep) is a 400 before any dispatch; nothing is metered', async (t) => {
  const seen = { bodies: [] as string[] };
  const records: UsageRecord[] = [];
  let deep: unknown = 'x';
  for (let i = 0; i < 5000; i++) deep = [deep];
  const error = await t.throwsAsync(completeChat(deps(fakeDispatcher({ json: {} }, seen), records), principal, { request: request({ guided_json: deep } as never), requestId: 'r1' }, new AbortController()), { instanceOf: ApiError });
  t.is(error!.status, 400);
  t.is(seen.bodies.length, 0);
  t.is(records.length, 0);
});

test('JSON answer: normalised, one usage record closed once; message steps rewrite what is dispatched', async (t) => {
  const seen = { bodies: [] as string[] };
  const records: UsageRecord[] = [];
  const upper: MessageStep = async (_p, messages) => messages.map((m) => ({ ...m, content: String(m.content).toUpperCase() }) as typeof m);
  const answer = { choices: [{ message: { content: 'ok' } }], usage: { prompt_tokens: 3, completion_tokens: 2 } };
  const result = await completeChat(deps(fakeDispatcher({ json: answer }, seen), records, [upper]), principal, { request: request(), requestId: 'r2' }, new AbortController());
  t.is(result.kind, 'json');
  if (result.kind !== 'json') return;
  t.is(result.body.object, 'chat.completion');
  t.is(result.body.choices[0]!.message.refusal, null);
  t.is(result.body.usage!.total_tokens, 5);
  t.is(JSON.parse(seen.bodies[0]!).messages[0].content, 'HI');
  t.is(records.length, 1);
  t.like(records[0], { request_id: 'r2', status: 200, outcome: 'ok', prompt_tokens: 3, completion_tokens: 2, attempts: 1, provider_id: 'prov_1' });
});

test('stream: typed events from a byte-by-byte CRLF upstream; usage captured, usage chunk dropped, one record when done', async (t) => {
  const seen = { bodies: [] as string[] };
  const records: UsageRecord[] = [];
  const sse =
    'data: {"id":"c","choices":[{"index":0,\r\ndata: "delta":{"content":"Hel"}}]}\r\n\r\n' +
    'data: {"id":"c","choices":[{"index":0,"delta":{"content":"lo"}}]}\r\n\r\n' +
    'data: {"id":"c","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}\r\n\r\ndata: [DONE]\r\n\r\n';
  const result = await completeChat(deps(fakeDispatcher({ sse }, seen), records), principal, { request: request({ stream: true }), requestId: 'r3' }, new AbortController());
  t.is(result.kind, 'stream');
  if (result.kind !== 'stream') return;
  const events: StreamEvent[] = [];
  for await (const event of result.events) events.push(event);
  t.is(events.at(-1)!.type, 'done');
  const texts = events.filter((e): e is Extract<StreamEvent, { type: 'raw' }> => e.type === 'raw').flatMap((e) => e.text.split('\n\n'));
  t.is(texts.length, 2);
  t.is(texts[0], 'data: {"id":"c","choices":[{"index":0,\ndata: "delta":{"content":"Hel"}}]}');
  const outcome = await result.done;
  t.is(outcome.outcome, 'ok');
  t.is(outcome.usage!.completion_tokens, 2);
  t.is(records.length, 1);
  t.like(records[0], { status: 200, outcome: 'ok', completion_tokens: 2, stream: true });
  t.true(JSON.parse(seen.bodies[0]!).stream_options.include_usage);
});

test("the request's own messages go on as their bytes; a step's replacement is serialised; a large non-ASCII answer is read intact", async (t) => {
  const text = '{"model":"m","messages":[ {"role":"user","content":"hi \\u00e9"} ]}';
  const raw = Buffer.from(text);
  const { members } = scanJsonMembers(raw, 64, FORWARDED_MEMBERS);
  const content = 'Ça marche — «ok» ✓ '.repeat(1000);
  const answer = { choices: [{ message: { content } }], usage: { prompt_tokens: 3, completion_tokens: 2 } };
  const asSent = { bodies: [] as string[] };
  const result = await completeChat(deps(fakeDispatcher({ json: answer }, asSent), []), principal, { request: JSON.parse(text), requestId: 'r-raw', rawMembers: members }, new AbortController());
  t.true(asSent.bodies[0]!.startsWith('{"messages":[ {"role":"user","content":"hi \\u00e9"} ],'), asSent.bodies[0]);
  t.is(result.kind === 'json' ? result.body.choices[0]!.message.content : null, content);
  const upper: MessageStep = (_p, messages) => messages.map((m) => ({ ...m, content: String(m.content).toUpperCase() }) as typeof m);
  const stepped = { bodies: [] as string[] };
  await completeChat(deps(fakeDispatcher({ json: answer }, stepped), [], [upper]), principal, { request: JSON.parse(text), requestId: 'r-step', rawMembers: members }, new AbortController());
  t.deepEqual(JSON.parse(stepped.bodies[0]!).messages, [{ role: 'user', content: 'HI É' }]);
});

// `store: true` through the domain function, with a fake conversation session recording what happens.
function fakeSessions(log: string[], options: { finish?: (answer: StoredAnswer) => Promise<void> } = {}): ConversationSessions {
  return {
    async prepare(input) {
      log.push('prepare');
      return {
        messages: input.messages,
        conversation: { id: 'conv_1', title: null },
        projectId: null,
        async stage() {
          log.push('stage');
        },
        async finish(answer) {
          log.push('finish');
          await options.finish?.(answer);
        },
      };
    },
  };
}

test('stream with store: the exchange is stored before done; a failed store ends the stream with an error event, not done', async (t) => {
  const sse = 'data: {"id":"c","choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\ndata: [DONE]\n\n';
  const log: string[] = [];
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  const stored: StoredAnswer[] = [];
  let finishing!: () => void;
  const finishCalled = new Promise<void>((resolve) => (finishing = resolve));
  const finish = async (answer: StoredAnswer) => {
    stored.push(answer);
    finishing();
    await released;
  };
  const store = { ...deps(fakeDispatcher({ sse }, { bodies: [] }), []), conversations: fakeSessions(log, { finish }) };
  const result = await completeChat(store, principal, { request: request({ stream: true, store: true }), requestId: 'r-s1' }, new AbortController());
  if (result.kind !== 'stream') return t.fail();
  const reading = (async () => {
    for await (const event of result.events) {
      log.push(event.type);
      if (event.type === 'done') break; // as the route does
    }
  })();
  // Whichever comes first: the store starting, or the stream ending without waiting for it.
  await Promise.race([finishCalled, reading]);
  t.false(log.includes('done'), `done came before the exchange was stored: ${log.join(',')}`);
  release();
  await reading;
  t.deepEqual(log.filter((e) => e !== 'raw' && e !== 'chunk'), ['prepare', 'stage', 'finish', 'done']);
  t.like(stored[0], { content: 'Hi', status: 'completed', toolCalls: null, model: 'm' });

  const errors: string[] = [];
  const failing = { ...deps(fakeDispatcher({ sse }, { bodies: [] }), []), conversations: fakeSessions([], { finish: async () => Promise.reject(new ApiError(404, "Conversation with id 'conv_1' not found.")) }), logger: { error: (_f: object, message: string) => void errors.push(message) } };
  const second = await completeChat(failing, principal, { request: request({ stream: true, store: true }), requestId: 'r-s2' }, new AbortController());
  if (second.kind !== 'stream') return t.fail();
  const events: StreamEvent[] = [];
  for await (const event of second.events) events.push(event);
  t.false(events.some((e) => e.type === 'done'));
  t.like(events.at(-1), { type: 'error', error: { type: 'not_found_error', code: 'not_found', request_id: 'r-s2' } });
  t.is(errors.length, 1, 'the failure is logged');
});

test('JSON with store: the tool calls reach the stored answer; a refused or failed request stores nothing', async (t) => {
  const log: string[] = [];
  const stored: StoredAnswer[] = [];
  const answer = { choices: [{ message: { content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }] }, finish_reason: 'tool_calls' }] };
  const base = deps(fakeDispatcher({ json: answer }, { bodies: [] }), []);
  await completeChat({ ...base, conversations: fakeSessions(log, { finish: async (a) => void stored.push(a) }) }, principal, { request: request({ store: true }), requestId: 'r-j1' }, new AbortController());
  t.deepEqual(stored[0]!.toolCalls, [{ id: 'call_1', name: 'f', arguments: '{"a":1}' }]);
  t.is(stored[0]!.content, '');

  // Refused at admission (403): prepared (read only), never staged nor stored.
  const refused: string[] = [];
  const admission = { admit: () => { throw new ApiError(403, 'not allowed', { code: 'model_not_allowed' }); } };
  await t.throwsAsync(completeChat({ ...base, admission, conversations: fakeSessions(refused) }, principal, { request: request({ store: true }), requestId: 'r-j2' }, new AbortController()), { instanceOf: ApiError });
  t.deepEqual(refused, ['prepare']);

  // The provider fails: staged, not stored.
  const failed: string[] = [];
  const failing: ChatDispatcher = { ...base.dispatcher, json: async () => { throw new ApiError(502, 'upstream failed'); } };
  await t.throwsAsync(completeChat({ ...base, dispatcher: failing, conversations: fakeSessions(failed) }, principal, { request: request({ store: true }), requestId: 'r-j3' }, new AbortController()), { instanceOf: ApiError });
  t.deepEqual(failed, ['prepare', 'stage']);

  // Staging refused (media-api refuses an inline image): the budget reserved is given back.
  const settled: Array<{ cost: number; tokens: number }> = [];
  const ticketed = { admit: () => ({ settle: async (spent: { cost: number; tokens: number }) => void settled.push(spent) }) };
  const staging: ConversationSessions = { prepare: async (input) => ({ ...(await fakeSessions([]).prepare(input, principal, model as never))!, stage: async () => { throw new ApiError(415, 'unsupported image'); } }) };
  await t.throwsAsync(completeChat({ ...base, admission: ticketed, conversations: staging }, principal, { request: request({ store: true }), requestId: 'r-j4' }, new AbortController()), { instanceOf: ApiError });
  t.deepEqual(settled, [{ cost: 0, tokens: 0 }]);
});
