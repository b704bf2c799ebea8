import test from 'ava';
import { ApiError, systemClock } from '../../../services/kit/index.js';
import type { StoredAnswer } from '../../../services/llm-api/chat/completions.js';
import { deepResearch, ResearchProgress, toResponsesInput } from '../../../services/llm-api/chat/research.js';
import { createResearchPort } from '../../../services/llm-api/chat/research-port.js';
import { servedOnLoopback } from '../../helpers/loopback-server.js';
import type { StreamEvent } from '../../../services/llm-api/chat/stream.js';

// The translation of the research loop's Responses events into a chat answer, fed event by event
// (the end-to-end behaviour is in test/responses/research.test.ts).
const added = (item: Record<string, unknown>) => ({ type: 'response.output_item.added', item });
const done = (item: Record<string, unknown>) => ({ type: 'response.output_item.done', item });
const args = (id: string, value: unknown) => ({ type: 'response.mcp_call_arguments.done', item_id: id, arguments: JSON.stringify(value) });

function scrape(progress: ResearchProgress, id: string, url: string, result: { output?: string; error?: string }) {
  progress.read(added({ id, type: 'mcp_call', name: 'scrape' }));
  progress.read(args(id, { url }));
  return progress.read(done({ id, type: 'mcp_call', name: 'scrape', status: result.error ? 'failed' : 'completed', output: result.output ?? null, error: result.error ?? null }));
}

test('a failed page read is reported and never cited; the step limit without an answer still lists what was read', (t) => {
  const progress = new ResearchProgress();
  progress.read({ type: 'response.created' });
  t.regex(scrape(progress, 'mcp_1', 'https://a.example/1', { error: 'The page answered HTTP 404' }), /scrape failed: The page answered HTTP 404/);
  t.is(scrape(progress, 'mcp_2', 'https://b.example/2', { output: '# Bee facts\nSource: https://b.example/2\n\nBees dance.' }), '  Read "Bee facts".\n');
  progress.read({
    type: 'response.incomplete',
    response: { status: 'incomplete', incomplete_details: { reason: 'max_steps' }, output: [{ type: 'mcp_call' }], usage: { input_tokens: 30, output_tokens: 6 } },
  });
  const answer = progress.answer();
  t.is(answer.error, null);
  t.is(answer.finishReason, 'length');
  t.true(answer.content.startsWith('The research reached its step limit'));
  t.true(answer.content.endsWith('Sources:\n- Bee facts: https://b.example/2'));
  t.false(answer.content.includes('a.example'), 'a page that failed is not a source');
  t.deepEqual(answer.usage, { prompt_tokens: 30, completion_tokens: 6, total_tokens: 36, completion_tokens_details: { reasoning_tokens: 0 } });
  t.deepEqual(
    answer.annotations.map((a) => [a.url_citation.url, answer.content.slice(a.url_citation.start_index, a.url_citation.end_index)]),
    [['https://b.example/2', 'https://b.example/2']],
  );
});

test("an answer the provider's content filter stopped is content_filter, not length", (t) => {
  const progress = new ResearchProgress();
  progress.read({
    type: 'response.incomplete',
    response: { status: 'incomplete', incomplete_details: { reason: 'content_filter' }, output: [{ type: 'message', content: [{ type: 'output_text', text: 'Partly' }] }] },
  });
  t.is(progress.answer().finishReason, 'content_filter');
});

test("the research stream's terminal event is read whole past the providers' 1 MiB event limit (it carries every page read)", async (t) => {
  const pages = Array.from({ length: 24 }, (_, i) => ({ type: 'mcp_call', id: `mcp_${i}`, name: 'scrape', status: 'completed', output: `# Page ${i}\n${'é'.repeat(40_000)}` }));
  const terminal = JSON.stringify({ type: 'response.completed', response: { status: 'completed', output: [...pages, { type: 'message', content: [{ type: 'output_text', text: 'Done.' }] }] } });
  t.true(Buffer.byteLength(terminal) > 1.5 * 1024 * 1024, 'the terminal event is over 1.5 MiB');
  const { origin } = await servedOnLoopback(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(`event: response.created\ndata: ${JSON.stringify({ type: 'response.created', response: { status: 'in_progress' } })}\n\n`);
    res.end(`event: response.completed\ndata: ${terminal}\n\n`);
  });
  const port = createResearchPort({ baseUrl: () => origin, gatewayToken: 'g'.repeat(32) });
  t.teardown(() => port.close());
  const principal = { userId: 'user_r', subject: 'user_r', email: null, username: null, authMethod: 'apikey' as const, isAdmin: false, isGuest: false };
  const events = [];
  for await (const event of await port.run(principal, { model: 'm', input: 'q' }, { requestId: 'req-research-big', signal: new AbortController().signal })) events.push(event);
  t.deepEqual(events.map((e) => e.type), ['response.created', 'response.completed']);
  t.is(events[1]!.response.output.length, 25);
});

test('a failed loop is an error (429 when a step was rate limited); a stream that ends early is a 502', (t) => {
  const limited = new ResearchProgress();
  limited.read({ type: 'response.failed', response: { status: 'failed', error: { code: 'rate_limit_exceeded', message: 'slow down' } } });
  t.like(limited.answer().error, { status: 429, code: 'rate_limit_exceeded', message: 'slow down' });
  const failed = new ResearchProgress();
  failed.read({ type: 'response.failed', response: { status: 'failed', error: { code: 'server_error', message: 'boom' } } });
  t.like(failed.answer().error, { status: 502, message: 'boom' });
  t.like(new ResearchProgress().answer().error, { status: 502 });
});

test('chat messages become Responses input: text and image parts, tool calls and their outputs', (t) => {
  const input = toResponsesInput([
    { role: 'system', content: 'be brief' },
    { role: 'user', content: [{ type: 'text', text: 'look' }, { type: 'image_url', image_url: { url: 'https://img.example/x.png', detail: 'low' } }] },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'f', arguments: '{}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: 'out' },
    { role: 'assistant', content: 'said' },
  ] as any);
  t.deepEqual(input, [
    { type: 'message', role: 'system', content: [{ type: 'input_text', text: 'be brief' }] },
    { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'look' }, { type: 'input_image', image_url: 'https://img.example/x.png', detail: 'low' }] },
    { type: 'function_call', call_id: 'call_1', name: 'f', arguments: '{}' },
    { type: 'function_call_output', call_id: 'call_1', output: 'out' },
    { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'said' }] },
  ]);
});

test('a custom tool call in the history reaches the research loop as a function call taking {input}', (t) => {
  const input = toResponsesInput([
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_c', type: 'custom', custom: { name: 'grep', input: 'needle' } }] },
    { role: 'tool', tool_call_id: 'call_c', content: 'found' },
  ] as any);
  t.deepEqual(input, [
    { type: 'function_call', call_id: 'call_c', name: 'grep', arguments: '{"input":"needle"}' },
    { type: 'function_call_output', call_id: 'call_c', output: 'found' },
  ]);
});

// deep_research with stream and store: the route stops reading at `done`, so the exchange must be
// stored before it (it was never stored when the store came after).
const researchEvents = [
  { type: 'response.created', response: { status: 'in_progress', output: [] } },
  { type: 'response.output_item.added', item: { id: 'm1', type: 'message', role: 'assistant' } },
  { type: 'response.output_text.delta', item_id: 'm1', delta: 'The answer.' },
  { type: 'response.output_item.done', item: { id: 'm1', type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'The answer.' }] } },
  { type: 'response.completed', response: { status: 'completed', output: [{ id: 'm1', type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'The answer.' }] }], usage: { input_tokens: 3, output_tokens: 2 } } },
];
const researchPort = { run: async () => (async function* () { yield* researchEvents; })() };
const principal = { userId: 'user_1', subject: 'user_1', email: null, username: null, authMethod: 'jwt', isAdmin: false, isGuest: false } as const;

async function researchStream(finish: (answer: StoredAnswer) => Promise<void>) {
  const messages = [{ role: 'user', content: 'q' }] as never;
  const result = await deepResearch({ port: researchPort, clock: systemClock }, principal, { request: { model: 'm', messages, stream: true, store: true, deep_research: true } as never, messages, requestId: 'r-research', finish }, new AbortController().signal);
  if (result.kind !== 'stream') throw new Error('expected a stream');
  const seen: StreamEvent[] = [];
  for await (const event of result.events) {
    seen.push(event);
    if (event.type === 'done') break; // as writeEventStream does
  }
  return seen;
}

test('stream with store: the research answer is stored before done; a failed store ends the stream with an error event', async (t) => {
  const stored: StoredAnswer[] = [];
  const seen = await researchStream(async (answer) => void stored.push(answer));
  t.is(seen.at(-1)!.type, 'done');
  t.is(stored.length, 1);
  t.like(stored[0], { content: 'The answer.', status: 'completed', toolCalls: null, model: 'm' });

  const failed = await researchStream(async () => {
    throw new ApiError(404, "Conversation with id 'conv_x' not found.");
  });
  t.false(failed.some((e) => e.type === 'done'));
  t.like(failed.at(-1), { type: 'error', error: { type: 'not_found_error', request_id: 'r-research' } });
});

test('a token budget under the research floor is a 400 naming the field the caller sent, before the loop starts', async (t) => {
  let runs = 0;
  const port = { run: async () => (runs++, (async function* () { yield* researchEvents; })()) };
  const messages = [{ role: 'user', content: 'q' }] as never;
  const research = (limits: Record<string, number>) =>
    deepResearch({ port, clock: systemClock }, principal, { request: { model: 'm', messages, deep_research: true, ...limits } as never, messages, requestId: 'r-floor' }, new AbortController().signal);
  for (const [field, value] of [['max_completion_tokens', 8], ['max_tokens', 15]] as const) {
    const error = await t.throwsAsync(research({ [field]: value }), { instanceOf: ApiError });
    t.like(error, { status: 400, param: field });
  }
  t.is(runs, 0, 'nothing reached response-api');
  t.is((await research({ max_completion_tokens: 16 })).kind, 'json');
  t.is(runs, 1);
});
