import { once } from 'node:events';
import { createServer, type RequestListener } from 'node:http';
import type { AddressInfo } from 'node:net';
import test, { type ExecutionContext } from 'ava';
import { CancelToken } from '../../../services/kit/index.js';
import { ProviderAnswer } from '../../../services/llm-api/routing/provider-answer.js';
import { createUpstream } from '../../../services/llm-api/routing/upstream.js';
import { fedAnswer } from '../../helpers/provider-answer.js';

// A provider's answer received as undici's dispatch handler, read whole or chunk by chunk without
// a Readable: the chunks in order, the end, the connection's failure, backpressure, and the two ways
// of letting go of a body (cut it, or let it finish so its connection is reused).

/** Everything the answer yields until the end, waiting only when nothing is buffered. */
async function readAll(answer: ProviderAnswer): Promise<string> {
  let text = '';
  for (;;) {
    const chunk = answer.read();
    if (chunk === null) return text;
    if (chunk === undefined) await answer.readable();
    else text += Buffer.from(chunk).toString();
  }
}

test('chunks arrive in order, what is buffered is taken at once, then the end', async (t) => {
  const { answer, push, end } = fedAnswer();
  t.is(answer.read(), undefined, 'nothing yet: the caller waits');
  push('a');
  push('b');
  await answer.readable();
  t.is(Buffer.from(answer.read()!).toString(), 'ab', 'both buffered chunks in one read');
  const rest = readAll(answer);
  push('c');
  push('d');
  end();
  t.is(await rest, 'cd');
  t.is(answer.read(), null);
});

test("the connection's failure is thrown by read, also when it comes while waiting", async (t) => {
  const { answer, fail } = fedAnswer();
  const pending = readAll(answer);
  fail(new Error('other side closed'));
  await t.throwsAsync(pending, { message: 'other side closed' });
});

test('a failure before the head fails the answer it was started for', async (t) => {
  const answer = new ProviderAnswer();
  answer.onResponseError(null as never, new Error('connect ECONNREFUSED'));
  await t.throwsAsync(answer.started, { message: 'connect ECONNREFUSED' });
});

test('release cuts a body that has not ended; an ended one is left alone', (t) => {
  const open = fedAnswer();
  open.push('partial');
  open.answer.release();
  t.true(open.controller.aborted);

  const ended = fedAnswer();
  ended.push('x');
  ended.end();
  ended.answer.release();
  t.false(ended.controller.aborted);
});

test('readAll: the whole body, or up to the limit (then the connection is cut)', async (t) => {
  const whole = fedAnswer();
  const read = whole.answer.readAll(100);
  whole.push('{"a":');
  whole.push('1}');
  whole.end();
  t.deepEqual(await read, { bytes: Buffer.from('{"a":1}'), truncated: false });

  const long = fedAnswer();
  long.push('x'.repeat(8));
  long.push('y'.repeat(8));
  const cut = await long.answer.readAll(10);
  t.is(cut.bytes.toString(), 'xxxxxxxxyy');
  t.true(cut.truncated);
  t.true(long.controller.aborted, 'the rest is not read');
});

test('backpressure: past 64 KiB unread the connection pauses, and reading resumes it', (t) => {
  const { answer, controller, push } = fedAnswer();
  push(Buffer.alloc(40 * 1024));
  t.false(controller.paused);
  push(Buffer.alloc(40 * 1024));
  t.true(controller.paused, 'paused once 80 KiB wait unread');
  t.is(answer.read()!.length, 80 * 1024);
  t.false(controller.paused);
  t.is(controller.resumes, 1);
});

test('discardRest lets the body run to its end (its connection can be reused), dropping what is left', async (t) => {
  const { answer, controller, push, end } = fedAnswer();
  push('data: [DONE]\n\n');
  await answer.readable();
  answer.read();
  answer.discardRest({ maxMs: 60_000, maxBytes: 1024 });
  push('trailing bytes');
  end();
  t.false(controller.aborted);
  t.is(answer.read(), null, 'what came after was dropped');
});

test('discardRest cuts a body that sends more than allowed, or does not end in time', async (t) => {
  const chatty = fedAnswer();
  chatty.answer.discardRest({ maxMs: 60_000, maxBytes: 10 });
  chatty.push('x'.repeat(11));
  t.true(chatty.controller.aborted);

  // Bytes already buffered when reading stopped count as well.
  const buffered = fedAnswer();
  buffered.push('y'.repeat(11));
  buffered.answer.discardRest({ maxMs: 60_000, maxBytes: 10 });
  t.true(buffered.controller.aborted);

  // The time bound: a body that stays open is cut when it passes (the abort is awaited, no sleep).
  // The answer's timer does not hold the process open (a server's does not need it to); this one
  // keeps the test's event loop alive until the abort arrives.
  const silent = fedAnswer();
  const alive = setInterval(() => {}, 1_000);
  const aborted = new Promise<Error>((resolve) => (silent.controller.onAbort = resolve));
  silent.answer.discardRest({ maxMs: 1, maxBytes: 1024 });
  const reason = await aborted.finally(() => clearInterval(alive));
  t.regex(reason.message, /did not end its answer in time/);
});

test('a signal that aborts cuts the request with its reason, before the connection or during the body', async (t) => {
  const during = new CancelToken();
  const fed = fedAnswer({ signal: during });
  const pending = readAll(fed.answer);
  during.abort(new Error('client closed'));
  t.true(fed.controller.aborted);
  await t.throwsAsync(pending, { message: 'client closed' });

  const before = new CancelToken();
  before.abort(new Error('deadline'));
  const early = fedAnswer({ signal: before });
  t.is(early.controller.reason?.message, 'deadline', 'aborted as soon as it had a connection');
  await t.throwsAsync(early.answer.started, { message: 'deadline' });
});

/** A provider on loopback with `handler`, and the upstream client llm-api uses to reach it. */
async function provider(t: ExecutionContext, handler: RequestListener) {
  const server = createServer(handler);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const upstream = createUpstream({ connections: 4, connectTimeoutMs: 5_000, headersTimeoutMs: 5_000, bodyTimeoutMs: 5_000 });
  t.teardown(async () => {
    await upstream.close();
    server.closeAllConnections();
    server.close();
  });
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/chat/completions`;
  return (requestId = 'req_1', signal?: CancelToken) => upstream.postJson(url, '{}', { apiKey: 'k', requestId }, signal);
}

test('over a real connection: each answer read whole, and the connections reused', async (t) => {
  const sockets = new Set<unknown>();
  const post = await provider(t, (req, res) => {
    sockets.add(req.socket);
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"id":"c1"}'));
  });
  for (const id of ['r1', 'r2', 'r3', 'r4', 'r5', 'r6']) {
    const answer = await post(id);
    t.is(answer.statusCode, 200);
    t.is(answer.headers['content-type'], 'application/json');
    t.is((await answer.readAll(1024)).bytes.toString(), '{"id":"c1"}');
  }
  // The next request is dispatched before the previous connection is back in the free list, so two
  // connections take turns; not one per request.
  t.true(sockets.size <= 2, `${sockets.size} connections for six requests`);
});

test('over a real connection: a body across chunks is read whole; one over the cap is cut there', async (t) => {
  const post = await provider(t, (req, res) => {
    req.resume();
    if (req.headers['x-request-id'] === 'small') {
      res.write('{"a":');
      setImmediate(() => res.end('"b"}'));
      return;
    }
    res.write('x'.repeat(600));
    res.write('y'.repeat(600));
    setImmediate(() => res.end('z'.repeat(600)));
  });
  t.deepEqual(await (await post('small')).readAll(1024), { bytes: Buffer.from('{"a":"b"}'), truncated: false });
  const read = await (await post('large')).readAll(1000);
  t.true(read.truncated);
  t.is(read.bytes.toString('utf8'), `${'x'.repeat(600)}${'y'.repeat(400)}`);
});

test('over a real connection: a body cut before its end fails the read; a cancel before the head fails the request', async (t) => {
  const post = await provider(t, (req, res) => {
    req.resume();
    if (req.headers['x-request-id'] === 'cut') {
      res.writeHead(200, { 'content-length': '100' });
      res.write('partial');
      setImmediate(() => res.socket?.destroy());
    }
    // 'held': no answer until the client gives up.
  });
  const cut = await post('cut');
  await t.throwsAsync(cut.readAll(1024));

  const cancel = new CancelToken();
  const held = post('held', cancel);
  cancel.abort(new Error('client closed'));
  await t.throwsAsync(held, { message: 'client closed' });
});
