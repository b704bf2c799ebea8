import { once } from 'node:events';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import { Agent } from 'undici';
import { CancelToken } from '../../services/kit/index.js';

// A CancelToken stands in for an AbortSignal on the chat path: it must behave as one for every
// reader there (aborted, reason, one-shot listeners) and for undici, which takes it as a signal.

test('the first reason wins and each listener runs once', (t) => {
  const token = new CancelToken();
  const calls: string[] = [];
  token.addEventListener('abort', () => calls.push(`a:${String(token.reason)}`));
  token.addEventListener('abort', () => calls.push('b'));
  t.false(token.aborted);
  token.abort('first');
  token.abort('second');
  t.true(token.aborted);
  t.is(token.reason, 'first');
  t.deepEqual(calls, ['a:first', 'b']);
});

test('a removed listener is not called, nor one added after the abort', (t) => {
  const token = new CancelToken();
  let removed = 0;
  let late = 0;
  const listener = () => removed++;
  token.addEventListener('abort', listener);
  token.removeEventListener('abort', listener);
  token.abort(new Error('gone'));
  token.addEventListener('abort', () => late++);
  t.is(removed, 0);
  t.is(late, 0);
});

test('its AbortSignal follows it, made before or after the abort', (t) => {
  const before = new CancelToken();
  const early = before.abortSignal;
  t.false(early.aborted);
  const reason = new Error('deadline');
  before.abort(reason);
  t.true(early.aborted);
  t.is(early.reason, reason);
  t.is(before.abortSignal, early, 'made once');

  const after = new CancelToken();
  after.abort('left');
  t.true(after.abortSignal.aborted);
  t.is(after.abortSignal.reason, 'left');
});

test('undici takes it as a request signal: aborting it ends a request in flight with its reason and closes the connection', async (t) => {
  const arrived: IncomingMessage[] = [];
  const server = createServer((req) => arrived.push(req)); // never answers
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const agent = new Agent();
  t.teardown(async () => {
    await agent.close();
    server.closeAllConnections();
    server.close();
  });
  const token = new CancelToken();
  const { port } = server.address() as AddressInfo;
  const pending = agent.request({ origin: `http://127.0.0.1:${port}`, path: '/', method: 'POST', body: '{}', signal: token as unknown as AbortSignal });
  await once(server, 'request');
  const reason = new Error('client left');
  const closed = once(arrived[0].socket, 'close');
  token.abort(reason);
  await t.throwsAsync(pending, { is: reason });
  await closed;
  t.pass('the upstream connection closed');
});

test('a listener undici removes after its request completes is not kept', async (t) => {
  const server = createServer((_req, res) => res.end('ok'));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const agent = new Agent();
  t.teardown(async () => {
    await agent.close();
    server.close();
  });
  const token = new CancelToken();
  const { port } = server.address() as AddressInfo;
  const res = await agent.request({ origin: `http://127.0.0.1:${port}`, path: '/', method: 'GET', signal: token as unknown as AbortSignal });
  t.is(await res.body.text(), 'ok');
  if (!res.body.closed) await once(res.body, 'close'); // undici lets go of the signal on the body's close
  t.deepEqual((token as unknown as { listeners: unknown[] | null }).listeners ?? [], []);
  // Aborting now does not reach the finished request, and nothing throws.
  t.notThrows(() => token.abort(new Error('late')));
});
