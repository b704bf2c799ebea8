import { EventEmitter } from 'node:events';
import type { Response } from 'express';
import test from 'ava';
import OpenAI from 'openai';
import { EventStreamWriter } from '../../services/response-api/responses/event-stream.js';
import { waitFor } from '../helpers/wait.js';
import { checkStream, MODEL, startResponsesPlatform, type ResponsesPlatform } from './harness.js';

// A Responses stream stays open through silences longer than the edge's read timeout: a step that
// writes no text for a while (reasoning, tool-call arguments) and a long tool call produce no
// events, so `: keep-alive` comments are written while nothing else is. SSE comments are skipped
// by every SDK: the stream still parses with the official `openai` SDK. The writer also waits for
// a full client connection to drain before the loop reads more of the step.
let p: ResponsesPlatform;

test.before(async () => {
  p = await startResponsesPlatform({ RESPONSES_SSE_KEEPALIVE_MS: '20' });
});
test.after.always(async () => {
  await p?.stop();
});

/** A fetch for the SDK that keeps a copy of the raw text of every event stream it reads. */
function tappedFetch(raw: string[]): typeof fetch {
  return async (input, init) => {
    const res = await fetch(input, init);
    if (!res.body || !res.headers.get('content-type')?.includes('text/event-stream')) return res;
    const decoder = new TextDecoder();
    const copy = new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, controller) {
        raw.push(decoder.decode(chunk, { stream: true }));
        controller.enqueue(chunk);
      },
    });
    return new Response(res.body.pipeThrough(copy), { status: res.status, headers: res.headers });
  };
}

test('a step that writes nothing for longer than RESPONSES_SSE_KEEPALIVE_MS: the client gets `: keep-alive` comments meanwhile, and the SDK parses the stream', async (t) => {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  p.fake.script('quiet-step', [{ gate, content: 'after the silence' }]);
  const { key } = await p.newClient();
  const raw: string[] = [];
  const client = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: key, maxRetries: 0, fetch: tappedFetch(raw) });
  const stream = await client.responses.create({ model: MODEL, input: 'quiet #script:quiet-step', tools: [], stream: true });
  const events: any[] = [];
  const read = (async () => {
    for await (const event of stream) events.push(event);
  })();
  let seenWhileHeld: string[];
  try {
    await waitFor(() => raw.join('').includes('\n\n: keep-alive\n\n'), 10_000, 'a keep-alive comment while the step is held');
    seenWhileHeld = events.map((e) => e.type);
  } finally {
    release();
  }
  await read;
  t.deepEqual(seenWhileHeld, ['response.created', 'response.in_progress'], 'the comment came while the step was held');
  const final = checkStream(t, events);
  t.is(final.status, 'completed');
  t.is(final.output[0].content[0].text, 'after the silence');
  t.deepEqual((await client.responses.retrieve(final.id)).output, final.output);
});

/** A response object whose socket is full until the test says otherwise. */
function fullResponse() {
  const res = new EventEmitter() as EventEmitter & Record<string, any>;
  const written: string[] = [];
  Object.assign(res, {
    writableEnded: false,
    destroyed: false,
    headersSent: false,
    full: true,
    status: () => res,
    setHeader: () => res,
    flushHeaders: () => void (res.headersSent = true),
    write: (text: string) => (written.push(text), !res.full),
    end: () => void (res.writableEnded = true),
  });
  return { res, written };
}

test('the writer: a write the socket does not take makes the loop wait until it drains (or closes); nothing to wait for otherwise', async (t) => {
  const { res, written } = fullResponse();
  const writer = new EventStreamWriter(res as unknown as Response, 0);
  t.is(writer.drained(), null, 'nothing written, nothing to wait for');
  writer.write({ type: 'response.created', sequence_number: 0 });
  t.is(written.length, 1);
  t.true(written[0]!.startsWith('event: response.created\ndata: {'));
  const waiting = writer.drained();
  t.truthy(waiting, 'a full socket makes the loop wait');
  let drained = false;
  void waiting!.then(() => (drained = true));
  await Promise.resolve();
  t.false(drained);
  res.full = false;
  res.emit('drain');
  await waiting;
  t.is(writer.drained(), null);

  res.full = true;
  writer.write({ type: 'response.in_progress', sequence_number: 1 });
  const again = writer.drained()!;
  res.emit('close');
  await again; // a client that left releases the wait too
  t.is(writer.drained(), null);
  writer.end();
  t.is(res.listenerCount('drain'), 0);
  t.is(res.listenerCount('close'), 0);
});
