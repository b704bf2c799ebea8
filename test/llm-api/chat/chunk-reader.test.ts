import { once } from 'node:events';
import { PassThrough, Readable } from 'node:stream';
import test from 'ava';
import { ChunkReader } from '../../../services/llm-api/chat/chunk-reader.js';

// The provider's body read without an async iterator: the same outcomes as the iterator (chunks in
// order, the end, the body's error, a premature close), and the two ways of letting go of it.

/** Everything the reader yields until the end, waiting only when nothing is buffered. */
async function readAll(reader: ChunkReader): Promise<string> {
  let text = '';
  for (;;) {
    const chunk = reader.read();
    if (chunk === null) return text;
    if (chunk === undefined) await reader.readable();
    else text += Buffer.from(chunk).toString();
  }
}

test('chunks arrive in order, what is buffered is taken at once, then the end', async (t) => {
  const body = new PassThrough();
  const reader = new ChunkReader(body);
  t.is(reader.read(), undefined, 'nothing yet: the caller waits');
  body.write('a');
  body.write('b');
  await reader.readable();
  t.is(Buffer.from(reader.read()!).toString(), 'ab', 'both buffered chunks in one read');
  const rest = readAll(reader);
  body.write('c');
  body.end('d');
  t.is(await rest, 'cd');
  t.is(reader.read(), null);
});

test("the body's error is thrown by read, also when it comes while waiting", async (t) => {
  const body = new PassThrough();
  const reader = new ChunkReader(body);
  const pending = readAll(reader);
  body.destroy(new Error('socket hang up'));
  await t.throwsAsync(pending, { message: 'socket hang up' });
});

test('a body closed before its end fails as a premature close', async (t) => {
  const body = new PassThrough();
  const reader = new ChunkReader(body);
  body.write('partial');
  const pending = readAll(reader);
  body.destroy();
  const error = await t.throwsAsync(pending);
  t.is((error as Error & { code?: string }).code, 'ERR_STREAM_PREMATURE_CLOSE');
});

test('release destroys a body that has not ended; an ended one is left alone', async (t) => {
  const open = new PassThrough();
  new ChunkReader(open).release();
  t.true(open.destroyed);

  const ended = Readable.from([Buffer.from('x')], { objectMode: false });
  const reader = new ChunkReader(ended);
  t.is(await readAll(reader), 'x');
  reader.release();
  t.false(ended.errored !== null && ended.errored !== undefined, 'no error was injected');
});

test('discardRest lets the body run to its end (its connection can be reused), dropping what is left', async (t) => {
  const body = new PassThrough();
  const reader = new ChunkReader(body);
  body.write('data: [DONE]\n\n');
  await reader.readable();
  reader.read();
  reader.discardRest({ maxMs: 60_000, maxBytes: 1024 });
  const ended = once(body, 'end');
  body.write('trailing bytes');
  body.end();
  await ended;
  t.false(body.errored !== null && body.errored !== undefined);
});

test('discardRest cuts a body that sends more than allowed, or does not end in time', async (t) => {
  const chatty = new PassThrough();
  new ChunkReader(chatty).discardRest({ maxMs: 60_000, maxBytes: 10 });
  const cut = once(chatty, 'close');
  chatty.write('x'.repeat(11));
  await cut;
  t.true(chatty.destroyed);
  t.false(chatty.readableEnded);

  // Bytes already buffered when reading stopped count as well.
  const buffered = new PassThrough();
  const reader = new ChunkReader(buffered);
  buffered.write('y'.repeat(11));
  await reader.readable();
  const closed = once(buffered, 'close');
  reader.discardRest({ maxMs: 60_000, maxBytes: 10 });
  await closed;
  t.false(buffered.readableEnded);

  // The time bound: a body that stays open is destroyed when it passes (its close is awaited, no sleep).
  // The reader's timer does not hold the process open (a server's does not need it to); this one
  // keeps the test's event loop alive until the close arrives.
  const silent = new PassThrough();
  const alive = setInterval(() => {}, 1_000);
  new ChunkReader(silent).discardRest({ maxMs: 1, maxBytes: 1024 });
  await once(silent, 'close').finally(() => clearInterval(alive));
  t.true(silent.destroyed);
  t.false(silent.readableEnded);
});
