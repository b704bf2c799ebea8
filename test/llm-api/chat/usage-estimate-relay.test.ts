import { Readable } from 'node:stream';
import test from 'ava';
import { ApiError, ClientClosed, estimateTextTokens, estimateTokens } from '../../../services/kit/index.js';
import { completeChat } from '../../../services/llm-api/chat/completions.js';
import type { ChatDispatcher } from '../../../services/llm-api/chat/dispatch.js';
import type { ChatRequest } from '../../../services/llm-api/chat/schemas.js';
import { countAnswerText, type StreamEvent } from '../../../services/llm-api/chat/stream.js';
import { fedAnswer } from '../../helpers/provider-answer.js';
import { attempt, pricedChatDeps, principal } from './priced-domain.js';
import { startRelay } from '../../helpers/relay.js';

// A stream that ends without the provider's usage report (the client left, the deadline, a failure)
// is charged an estimate: the relay counts the answer text it passes on, without parsing what it
// forwards as is, and the domain function turns that and the prompt into the recorded usage.

const event = (chunk: unknown) => `data: ${JSON.stringify(chunk)}\n\n`;
const delta = (d: Record<string, unknown>, index = 0) => event({ id: 'c', object: 'chat.completion.chunk', choices: [{ index, delta: d, finish_reason: null }], usage: null });

test('the answer text is counted as the decoded strings: escapes count once, other keys and keys inside strings not at all', (t) => {
  const content = 'say "content":"no" \\ and\nnew line \u0001 é 😀';
  const reasoning = 'think "reasoning":"x"';
  const args = '{"q":"a \\"b\\""}';
  const text =
    delta({ role: 'assistant', content: '' }) +
    delta({ content, my_content: 'not answer text', refusal: null }) +
    delta({ reasoning_content: reasoning }) +
    delta({ reasoning: 'ok' }, 1) +
    delta({ tool_calls: [{ index: 0, id: 'call_1', function: { name: 'lookup', arguments: args } }] }) +
    // Spaced JSON, as some providers write it.
    'data: {"choices": [{"index": 0, "delta": {"content" : "spaced", "refusal": "no"}}]}\n\n';
  const counts = { relayedChars: 0, relayedReasoningChars: 0 };
  countAnswerText(text, counts);
  t.is(counts.relayedChars, content.length + reasoning.length + 2 + args.length + 'spaced'.length + 'no'.length);
  t.is(counts.relayedReasoningChars, reasoning.length + 2);
});

test('a stream the client leaves: what was relayed is counted, on the fast path and the parsed one; no usage', async (t) => {
  const controller = new AbortController();
  const fed = fedAnswer({ signal: controller.signal });
  const relay = startRelay(delta({ role: 'assistant', content: '' }) + delta({ content: 'Hello' }), Readable.from([]), { rest: fed.answer, signal: controller.signal, collect: false });
  const events: StreamEvent[] = [];
  const reading = (async () => {
    for await (const e of relay.events) {
      events.push(e);
      if (events.length === 1) {
        // A read with an `id:` field is parsed event by event (not forwarded whole); its text still counts.
        fed.push(delta({ content: ' world' }) + `id: 7\n${delta({ content: '!' })}`);
      } else if (events.length >= 2) controller.abort(new ClientClosed());
    }
  })();
  await reading;
  const outcome = await relay.done;
  t.is(outcome.outcome, 'client_closed');
  t.is(outcome.usage, null);
  t.true(events.every((e) => e.type === 'raw'));
  t.is(outcome.relayedChars, 'Hello world!'.length);
  t.is(outcome.relayedReasoningChars, 0);
});

// The domain function (priced-domain.ts) with a dispatcher whose stream is fed by hand.
function setup() {
  let feed!: ReturnType<typeof fedAnswer>;
  const dispatcher: ChatDispatcher = {
    plan: () => [attempt],
    async json() {
      throw new Error('not used');
    },
    async stream(_attempts, request) {
      feed = fedAnswer({ signal: request.signal });
      return { value: { firstChunk: Buffer.from(delta({ role: 'assistant', content: '' })), rest: feed.answer }, attempt, tries: 1 };
    },
    logStreamFailure() {},
  };
  return { ...pricedChatDeps(dispatcher), feed: () => feed };
}

const tools = [{ type: 'function', function: { name: 'lookup', description: 'Looks a thing up', parameters: { type: 'object', properties: { q: { type: 'string' } } } } }];
const request = (): ChatRequest => ({ model: 'm', messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Tell me a long story' }], tools, stream: true }) as ChatRequest;

test('the deadline cuts a stream without a usage report: the estimate is recorded, marked, and charged to the budget', async (t) => {
  const { deps, records, settled, feed } = setup();
  const cancellation = new AbortController();
  const result = await completeChat(deps, principal, { request: request(), requestId: 'r-deadline' }, cancellation);
  if (result.kind !== 'stream') return t.fail();
  const answer = 'Once upon a time, "a fox" said:\n';
  const types: string[] = [];
  for await (const e of result.events) {
    types.push(e.type);
    if (types.length === 1) feed().push(delta({ reasoning_content: 'plot' }) + delta({ content: answer }));
    else if (types.length === 2) cancellation.abort(new ApiError(504, 'The model provider took longer than the time limit for one completion')); // as the deadline does
  }
  t.is(types.at(-1), 'error');
  const outcome = await result.done;
  t.is(outcome.outcome, 'deadline');
  const prompt = estimateTokens({ role: 'system', content: 'Be brief.' }) + estimateTokens({ role: 'user', content: 'Tell me a long story' }) + estimateTokens({ tool_calls: tools });
  const completion = estimateTextTokens('plot'.length + answer.length);
  const cost = Math.round(prompt * 1 + completion * 100);
  t.is(records.length, 1);
  t.like(records[0], { request_id: 'r-deadline', status: 504, outcome: 'deadline', usage_estimated: true, prompt_tokens: prompt, completion_tokens: completion, reasoning_tokens: 1, total_tokens: prompt + completion, cost_micro_usd: cost });
  t.true(completion > 0 && cost > 0);
  t.deepEqual(settled, [{ cost, tokens: prompt + completion }]);
  // The edge's access log gets the same counts.
  t.like(await result.report!, { prompt_tokens: prompt, completion_tokens: completion });
});

test("a stream with the provider's usage report records and charges it exactly, not estimated", async (t) => {
  const { deps, records, settled, feed } = setup();
  const result = await completeChat(deps, principal, { request: request(), requestId: 'r-exact' }, new AbortController());
  if (result.kind !== 'stream') return t.fail();
  const types: string[] = [];
  for await (const e of result.events) {
    types.push(e.type);
    if (types.length === 1) {
      feed().push(delta({ content: 'A short story that is much longer than the counts say.' }) + event({ id: 'c', choices: [], usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } }) + 'data: [DONE]\n\n');
      feed().end();
    }
  }
  t.is(types.at(-1), 'done');
  await result.done;
  t.like(records[0], { outcome: 'ok', status: 200, usage_estimated: false, prompt_tokens: 7, completion_tokens: 3, total_tokens: 10, cost_micro_usd: 7 + 300 });
  t.deepEqual(settled, [{ cost: 307, tokens: 10 }]);
});

test('include_usage with a provider that sends no usage (it ignored stream_options): the stream still ends with the usage chunk, the estimate that is recorded', async (t) => {
  const { deps, records } = setup();
  const first = event({ id: 'chatcmpl-up', object: 'chat.completion.chunk', created: 1_699_999_999, model: 'up-model', choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] });
  deps.dispatcher.stream = async (_attempts, request) => {
    const feed = fedAnswer({ signal: request.signal });
    feed.push(delta({ content: 'A story without a count.' }) + event({ id: 'chatcmpl-up', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }) + 'data: [DONE]\n\n');
    feed.end();
    return { value: { firstChunk: Buffer.from(first), rest: feed.answer }, attempt, tries: 1 };
  };
  const result = await completeChat(deps, principal, { request: { ...request(), stream_options: { include_usage: true } }, requestId: 'r-no-usage' }, new AbortController());
  if (result.kind !== 'stream') return t.fail();
  const events: StreamEvent[] = [];
  for await (const e of result.events) events.push(e);
  t.is(events.at(-1)!.type, 'done');
  const usageEvent = events.at(-2)!;
  if (usageEvent.type !== 'chunk') return t.fail(`expected the usage chunk before done, got ${usageEvent.type}`);
  await result.done;
  t.like(records[0], { outcome: 'ok', usage_estimated: true });
  // The chunk OpenAI ends an include_usage stream with: the stream's id, created and model, no choices.
  t.like(usageEvent.chunk, { id: 'chatcmpl-up', object: 'chat.completion.chunk', created: 1_699_999_999, model: 'up-model', choices: [] });
  t.like(usageEvent.chunk.usage, { prompt_tokens: records[0]!.prompt_tokens, completion_tokens: records[0]!.completion_tokens, total_tokens: records[0]!.total_tokens });
  t.true(records[0]!.completion_tokens > 0);

  // Without include_usage, nothing is added.
  const plain = setup();
  plain.deps.dispatcher.stream = deps.dispatcher.stream;
  const quiet = await completeChat(plain.deps, principal, { request: request(), requestId: 'r-no-usage-quiet' }, new AbortController());
  if (quiet.kind !== 'stream') return t.fail();
  const types: string[] = [];
  for await (const e of quiet.events) types.push(e.type);
  t.deepEqual(types.filter((type) => type === 'chunk'), []);
  t.is(types.at(-1), 'done');
});
