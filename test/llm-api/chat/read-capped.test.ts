import type { RequestListener } from 'node:http';
import { Readable } from 'node:stream';
import test, { type ExecutionContext } from 'ava';
import { request } from 'undici';
import { readCapped } from '../../../domains/catalog/index.js';
import { servedOnLoopback } from '../../helpers/loopback-server.js';

// A provider's model list (and any other body read through a Node stream) is read with a cap: whole
// when it fits, cut at the cap when it does not, and a failure when the body ends early, as the
// stream would report it. Completions are read by routing/provider-answer.ts, with its own cap.

async function serve(t: ExecutionContext, handler: RequestListener) {
  const { origin, agent } = await servedOnLoopback(t, handler);
  return { get: () => request(`${origin}/`, { dispatcher: agent }) };
}

test('a body under the cap is read whole, across chunks', async (t) => {
  const server = await serve(t, (_req, res) => {
    res.write('{"a":');
    setImmediate(() => res.end('"b"}'));
  });
  const res = await server.get();
  const read = await readCapped(res.body, 1024);
  t.false(read.truncated);
  t.is(read.bytes.toString('utf8'), '{"a":"b"}');
});

test('a body over the cap stops at the cap and the rest is not read', async (t) => {
  const server = await serve(t, (_req, res) => {
    res.write('x'.repeat(600));
    res.write('y'.repeat(600));
    setImmediate(() => res.end('z'.repeat(600)));
  });
  const res = await server.get();
  const read = await readCapped(res.body, 1000);
  t.true(read.truncated);
  t.is(read.bytes.length, 1000);
  t.is(read.bytes.toString('utf8'), `${'x'.repeat(600)}${'y'.repeat(400)}`);
  t.true(res.body.destroyed);
});

test('a body cut before its end rejects', async (t) => {
  const server = await serve(t, (_req, res) => {
    res.writeHead(200, { 'content-length': '100' });
    res.write('partial');
    setImmediate(() => res.socket?.destroy());
  });
  const res = await server.get();
  await t.throwsAsync(readCapped(res.body, 1024));
});

test('an empty body and any Node readable are read too', async (t) => {
  t.deepEqual(await readCapped(Readable.from([], { objectMode: false }), 10), { bytes: Buffer.alloc(0), truncated: false });
  const read = await readCapped(Readable.from([Buffer.from('ab'), Buffer.from('cd')]), 3);
  t.deepEqual(read, { bytes: Buffer.from('abc'), truncated: true });
  const failing = new Readable({ read() { this.destroy(new Error('boom')); } });
  await t.throwsAsync(readCapped(failing, 10), { message: 'boom' });
});
