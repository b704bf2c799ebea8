import { once } from 'node:events';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import { ApiError, CancelToken, ClientClosed } from '../../../services/kit/index.js';
import { createUpstream } from '../../../services/llm-api/routing/upstream.js';

// A completion waiting for a provider connection (the pool is at its limit: every connection
// carries a long stream) whose client leaves, or whose deadline passes, fails at once with the
// signal's reason instead of waiting for a connection to free up, and never reaches the provider.

async function heldProvider() {
  const seen: string[] = [];
  const held: ServerResponse[] = [];
  let holding: () => void = () => {};
  const arrived = new Promise<void>((resolve) => (holding = resolve));
  const server = createServer((req, res) => {
    seen.push(req.url!);
    if (req.url === '/hold') {
      held.push(res);
      holding();
    } else res.end('{"ok":true}');
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const close = () => {
    server.closeAllConnections();
    server.close();
  };
  return { base, seen, held, arrived, close };
}

for (const [what, reason] of [
  ['the client leaves', () => new ClientClosed()],
  ['the deadline passes', () => new ApiError(504, 'The completion took longer than allowed')],
] as const) {
  test(`queued for a connection when ${what}: fails at once with the reason, never sent`, async (t) => {
    const provider = await heldProvider();
    const upstream = createUpstream({ connections: 1, connectTimeoutMs: 5_000, headersTimeoutMs: 60_000, bodyTimeoutMs: 60_000 });
    t.teardown(async () => {
      provider.close();
      await upstream.close().catch(() => {});
    });
    // The pool's only connection is busy with an answer that does not come yet.
    const first = upstream.postJson(`${provider.base}/hold`, '{}', { apiKey: 'sk-a', requestId: 'r1' });
    first.catch(() => {}); // awaited below; a failed assertion before then must not leave it unobserved
    await provider.arrived;
    const token = new CancelToken();
    const queued = upstream.postJson(`${provider.base}/queued`, '{}', { apiKey: 'sk-b', requestId: 'r2' }, token);
    const expected = reason();
    token.abort(expected);
    const error = await t.throwsAsync(queued);
    t.is(error, expected);
    // Still held: the rejection did not wait for the connection.
    t.is(provider.held.length, 1);
    t.false(provider.held[0]!.writableEnded);

    provider.held[0]!.end('{"ok":true}');
    const answer = await first;
    t.is(answer.statusCode, 200);
    await answer.readAll(1024);
    // The next request on the freed connection is answered; the aborted one never went out.
    const next = await upstream.postJson(`${provider.base}/next`, '{}', { apiKey: 'sk-c', requestId: 'r3' });
    t.is(next.statusCode, 200);
    await next.readAll(1024);
    t.deepEqual(provider.seen, ['/hold', '/next']);
  });
}
