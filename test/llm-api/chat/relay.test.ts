import test from 'ava';
import { PassThrough, Readable } from 'node:stream';
import type { StreamEvent } from '../../../services/llm-api/chat/stream.js';
import { startRelay } from '../../helpers/relay.js';

// The relay parses only the events that need a look (usage, errors, [DONE], the first chunk when
// something is merged into it) and passes the others through untouched, in order, batched.

const event = (data: unknown) => `data: ${JSON.stringify(data)}`;
const content = (i: number) => event({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: `w${i}` } }] });
const usageOnly = event({ id: 'c', object: 'chat.completion.chunk', choices: [], usage: { prompt_tokens: 3, completion_tokens: 5, total_tokens: 8 } });

async function relay(reads: string[], options: { clientWantsUsage?: boolean; collect?: boolean; firstChunkExtra?: { conversation: { id: string } } } = {}) {
  const [first, ...rest] = reads.map((text) => Buffer.from(text));
  return collectRelay(startRelay(first!, Readable.from(rest, { objectMode: false }), { ...options, firstChunkExtra: options.firstChunkExtra as never }));
}

async function collectRelay({ events, done }: ReturnType<typeof startRelay>) {
  const out: StreamEvent[] = [];
  for await (const e of events) out.push(e);
  return { out, outcome: await done };
}

/** What the client would read: each event's text, in order. */
const texts = (events: StreamEvent[]) =>
  events.flatMap((e) => (e.type === 'raw' ? e.text.split('\n\n') : e.type === 'chunk' ? [event(e.chunk)] : e.type === 'done' ? ['[DONE]'] : ['error']));

test('a whole answer in one read: content passes as one batch, the usage-only chunk is dropped but counted, one done', async (t) => {
  const read = [content(1), content(2), content(3), usageOnly, 'data: [DONE]', ''].join('\n\n');
  const { out, outcome } = await relay([read]);
  t.deepEqual(texts(out), [content(1), content(2), content(3), '[DONE]']);
  t.is(out.filter((e) => e.type === 'raw').length, 1, 'the plain events leave as one write');
  t.deepEqual(outcome.usage, { prompt_tokens: 3, completion_tokens: 5, total_tokens: 8 });
  t.is(outcome.outcome, 'ok');
});

test('the usage chunk is kept in place when the client asked for it, and empty events are dropped', async (t) => {
  const read = [content(1), '', content(2), usageOnly, 'data: [DONE]', ''].join('\n\n');
  const { out } = await relay([read], { clientWantsUsage: true });
  t.deepEqual(texts(out), [content(1), content(2), usageOnly, '[DONE]']);
});

test('an error event in the middle of a read: the events before it are delivered, then our error, nothing after', async (t) => {
  const read = [content(1), content(2), event({ error: { message: 'upstream secret detail' } }), content(3), ''].join('\n\n');
  const { out, outcome } = await relay([read]);
  t.deepEqual(texts(out), [content(1), content(2), 'error']);
  t.is(outcome.outcome, 'upstream_error_event');
  t.false(JSON.stringify(out).includes('secret'));
});

test('an event named error is a stream error whatever its data: no error key, a chunk-like body, no data at all, the last of several names', async (t) => {
  const cases = [
    `event: error\ndata: {"message":"upstream secret overloaded","type":"overloaded_error"}`,
    `event:error\n${content(9)}`,
    `id: 7\nevent: error`,
    `event: message\nevent: error\ndata: "upstream secret text"`,
  ];
  for (const bad of cases) {
    const read = [content(1), bad, content(2), 'data: [DONE]', ''].join('\n\n');
    const upstream: string[] = [];
    const started = startRelay(Buffer.from(read), Readable.from([], { objectMode: false }), { onUpstreamError: (detail: string) => void upstream.push(detail) } as never);
    const { out, outcome } = await collectRelay(started);
    t.deepEqual(texts(out), [content(1), 'error'], bad);
    t.is(outcome.outcome, 'upstream_error_event', bad);
    t.false(JSON.stringify(out).includes('secret'), bad);
    t.is(upstream.length, 1, bad);
  }
  // The last event of a body (no blank line after it) too.
  const tail = await relay([`${content(1)}\n\n`, 'event: error\ndata: {"detail":"gone"}']);
  t.deepEqual(texts(tail.out), [content(1), 'error']);
  t.is(tail.outcome.outcome, 'upstream_error_event');
  // Other names, and data mentioning error, still pass.
  const named = await relay([[`event: errors\n${content(1)}`, content(2), 'data: [DONE]', ''].join('\n\n')]);
  t.is(named.outcome.outcome, 'ok');
  t.deepEqual(texts(named.out).at(-1), '[DONE]');
});

test("a body that ends inside an event fails the stream (no cut JSON, no [DONE]); a whole last event without its blank line passes", async (t) => {
  const cut = await relay([`${content(1)}\n\n`, `${content(2)}\n\n${content(3).slice(0, 30)}`]);
  t.deepEqual(texts(cut.out), [content(1), content(2), 'error']);
  t.is(cut.outcome.outcome, 'stream_error');
  const whole = await relay([`${content(1)}\n\n`, `${content(2)}\n`]);
  t.deepEqual(texts(whole.out), [content(1), content(2), '[DONE]']);
  t.is(whole.outcome.outcome, 'ok');
});

test('the conversation is merged into the first chunk with choices only; events split across reads keep their order', async (t) => {
  const reads = [`${content(1)}\n\n${content(2)}\n\n${content(3).slice(0, 10)}`, `${content(3).slice(10)}\n\n${usageOnly}\n\ndata: [DONE]\n\n`];
  const { out } = await relay(reads, { firstChunkExtra: { conversation: { id: 'conv_1' } } });
  const [first, ...others] = texts(out);
  t.deepEqual(JSON.parse(first!.slice(6)).conversation, { id: 'conv_1' });
  t.deepEqual(others, [content(2), content(3), '[DONE]']);
});

test("the provider's [DONE] ends the relay: later events are dropped, and its body is left to finish", async (t) => {
  const body = new PassThrough();
  const read = [content(1), 'data: [DONE]', content(2), ''].join('\n\n');
  const { out, outcome } = await collectRelay(startRelay(read, body));
  t.deepEqual(texts(out), [content(1), '[DONE]']);
  t.is(outcome.outcome, 'ok');
  t.false(body.destroyed, 'not cut: the rest is read and dropped so the connection can be reused');
  body.end(content(3));
});

// With `store: true` the relay collects choice 0's tool calls from their deltas, and stores the
// exchange before the stream's last event.
const toolDelta = (calls: unknown[]) => event({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { tool_calls: calls } }] });

test('tool calls are assembled from their deltas: parallel calls by index, arguments in pieces, index-less fragments', async (t) => {
  const read = [
    toolDelta([{ index: 0, id: 'call_a', type: 'function', function: { name: 'lookup', arguments: '' } }]),
    toolDelta([{ index: 1, id: 'call_b', type: 'function', function: { name: 'fetch', arguments: '{"u' } }]),
    toolDelta([{ index: 0, function: { arguments: '{"q":' } }]),
    toolDelta([{ index: 1, function: { arguments: '":1}' } }]),
    toolDelta([{ index: 0, function: { arguments: '"x"}' } }]),
    event({ id: 'c', object: 'chat.completion.chunk', choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] }),
    'data: [DONE]',
    '',
  ].join('\n\n');
  const { outcome } = await relay([read], { collect: true });
  t.deepEqual(outcome.toolCalls?.map(({ id, name, arguments: args }) => ({ id, name, args })), [
    { id: 'call_a', name: 'lookup', args: '{"q":"x"}' },
    { id: 'call_b', name: 'fetch', args: '{"u":1}' },
  ]);
  t.is(outcome.finishReason, 'tool_calls');

  const indexless = [toolDelta([{ id: 'call_1', function: { name: 'f', arguments: '{"a"' } }]), toolDelta([{ function: { arguments: ':1}' } }]), toolDelta([{ id: 'call_2', function: { name: 'g', arguments: '{}' } }]), 'data: [DONE]', ''].join('\n\n');
  const second = await relay([indexless], { collect: true });
  t.deepEqual(second.outcome.toolCalls?.map((c) => [c.id, c.name, c.arguments]), [['call_1', 'f', '{"a":1}'], ['call_2', 'g', '{}']]);

  const plain = await relay([[content(1), 'data: [DONE]', ''].join('\n\n')], { collect: true });
  t.is(plain.outcome.toolCalls, null);
});

test('with save, done comes only once the exchange is stored; a failed save ends the stream with an error event instead', async (t) => {
  const read = [content(1), content(2), 'data: [DONE]', ''].join('\n\n');
  const order: string[] = [];
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let saving!: () => void;
  const saveStarted = new Promise<void>((resolve) => (saving = resolve));
  const started = startRelay(read, Readable.from([], { objectMode: false }), {
    collect: true,
    async save(outcome, complete) {
      order.push(`save ${outcome.content} ${complete}`);
      saving();
      await released;
      order.push('saved');
    },
  });
  const reading = (async () => {
    for await (const e of started.events) order.push(e.type);
  })();
  await saveStarted;
  t.false(order.includes('done'), 'no done while the save is running');
  release();
  await reading;
  t.deepEqual(order.slice(-3), ['save w1w2 true', 'saved', 'done']);

  const failing = await collectRelay(
    startRelay(read, Readable.from([], { objectMode: false }), {
      collect: true,
      save: async () => {
        throw new Error('database on fire');
      },
    }),
  );
  t.is(failing.out.at(-1)!.type, 'error');
  t.false(failing.out.some((e) => e.type === 'done'));
  const last = failing.out.at(-1) as Extract<StreamEvent, { type: 'error' }>;
  t.like(last.error, { type: 'internal_error', code: 'server_error', request_id: 'req_test' });
  t.false(JSON.stringify(last).includes('on fire'), 'the cause stays in the log');
  t.is(failing.outcome.outcome, 'ok', 'the answer itself was complete (usage is recorded as such)');
});

test('with save, a stream that fails midway stores what arrived (incomplete) before its error event, once', async (t) => {
  const order: string[] = [];
  const read = [content(1), event({ error: { message: 'boom' } }), ''].join('\n\n');
  const started = startRelay(read, Readable.from([], { objectMode: false }), {
    collect: true,
    async save(outcome, complete) {
      order.push(`save ${outcome.content} ${complete}`);
    },
  });
  for await (const e of started.events) order.push(e.type);
  t.deepEqual(order, ['raw', 'save w1 false', 'error']);
  t.is((await started.done).outcome, 'upstream_error_event');
});
