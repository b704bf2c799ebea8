import { once } from 'node:events';
import type { IncomingMessage } from 'node:http';
import test from 'ava';
import { CancelToken } from '../../services/kit/index.js';
import { servedOnLoopback } from '../helpers/loopback-server.js';

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
  let arrived!: (req: IncomingMessage) => void;
  const request = new Promise<IncomingMessage>((resolve) => (arrived = resolve));
  const { origin, agent } = await servedOnLoopback(t, (req) => arrived(req)); // never answers
  const token = new CancelToken();
  const pending = agent.request({ origin, path: '/', method: 'POST', body: '{}', signal: token as unknown as AbortSignal });
  const closed = once((await request).socket, 'close');
  const reason = new Error('client left');
  token.abort(reason);
  await t.throwsAsync(pending, { is: reason });
  await closed;
  t.pass('the upstream connection closed');
});

test('a listener undici removes after its request completes is not kept', async (t) => {
  const { origin, agent } = await servedOnLoopback(t, (_req, res) => res.end('ok'));
  const token = new CancelToken();
  const res = await agent.request({ origin, path: '/', method: 'GET', signal: token as unknown as AbortSignal });
  t.is(await res.body.text(), 'ok');
  if (!res.body.closed) await once(res.body, 'close'); // undici lets go of the signal on the body's close
  t.deepEqual((token as unknown as { listeners: unknown[] | null }).listeners ?? [], []);
  // Aborting now does not reach the finished request, and nothing throws.
  t.notThrows(() => token.abort(new Error('late')));
});
