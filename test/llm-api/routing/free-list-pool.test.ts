import { once } from 'node:events';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import test, { type ExecutionContext } from 'ava';
import { Agent, buildConnector, Pool, request } from 'undici';
import { createProviderPool, freeListPoolAvailable } from '../../../services/llm-api/routing/free-list-pool.js';
import { untilFree } from '../../helpers/undici.js';

// The provider pool finds a free connection without walking every busy one, and behaves as
// undici's Pool otherwise: bounded connections, queueing when all are busy, reuse of a freed
// connection, recovery after a connection that failed. A real server on loopback; answers are held
// open until the test releases them, so "busy" is a fact, not a timing.

interface HeldServer {
  origin: string;
  /** Connections the server accepted so far. */
  connections(): number;
  /** Requests waiting for an answer, oldest first. */
  held: ServerResponse[];
  /** Resolves once `n` requests are held. */
  heldAtLeast(n: number): Promise<void>;
  close(): Promise<void>;
}

async function heldServer(options: { dropFirstConnection?: boolean } = {}): Promise<HeldServer> {
  let accepted = 0;
  const sockets = new Set<Socket>();
  const held: ServerResponse[] = [];
  let waiter: { n: number; resolve: () => void } | undefined;
  const server = createServer((req, res) => {
    req.resume();
    held.push(res);
    if (waiter && held.length >= waiter.n) waiter.resolve();
  });
  server.on('connection', (socket) => {
    accepted++;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    if (options.dropFirstConnection && accepted === 1) socket.destroy();
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    connections: () => accepted,
    held,
    heldAtLeast: (n) => (held.length >= n ? Promise.resolve() : new Promise<void>((resolve) => (waiter = { n, resolve }))),
    async close() {
      for (const socket of sockets) socket.destroy();
      server.close();
      await once(server, 'close');
    },
  };
}

const answer = (res: ServerResponse, text: string) => res.end(text);

/** A held server and an Agent whose pools are the provider pool, both closed after the test. */
async function poolOnServer(t: ExecutionContext, connections: number, options?: { dropFirstConnection?: boolean }) {
  const server = await heldServer(options);
  const agent = new Agent({ factory: createProviderPool, connections });
  t.teardown(async () => {
    await agent.close();
    await server.close();
  });
  return { server, agent };
}

test('this undici has the internals the free list needs', (t) => {
  t.true(freeListPoolAvailable, 'if an undici upgrade fails this, the provider pool fell back to a plain Pool');
  const pool = createProviderPool('http://127.0.0.1:1', { connections: 4 });
  t.true(pool instanceof Pool);
  t.not(pool.constructor, Pool, 'the free-list pool, not undici’s own');
  t.is(createProviderPool('http://127.0.0.1:1', {}).constructor, Pool, 'unbounded: plain Pool');
});

test('busy connections are bounded; requests past the bound queue and run as connections free up', async (t) => {
  const { server, agent } = await poolOnServer(t, 3);
  const bodies = Array.from({ length: 7 }, (_, i) =>
    request(`${server.origin}/${i}`, { dispatcher: agent }).then(async (res) => `${res.statusCode} ${await res.body.text()}`),
  );
  await server.heldAtLeast(3);
  t.is(server.held.length, 3, 'three in flight, four queued');
  t.is(server.connections(), 3);

  // Answering one frees its connection, which takes the next queued request.
  answer(server.held.shift()!, 'a');
  await server.heldAtLeast(3);
  t.is(server.connections(), 3, 'the freed connection was reused, not a new one opened');
  for (let i = 0; i < 6; i++) {
    await server.heldAtLeast(1);
    answer(server.held.shift()!, 'b');
  }
  const answered = await Promise.all(bodies);
  t.deepEqual(answered.filter((b) => b === '200 a'), ['200 a']);
  t.is(answered.filter((b) => b === '200 b').length, 6);
  t.is(server.connections(), 3, 'seven requests over three connections');
});

test('sequential requests reuse one connection', async (t) => {
  const { server, agent } = await poolOnServer(t, 100);
  for (let i = 0; i < 5; i++) {
    const pending = request(`${server.origin}/seq`, { dispatcher: agent });
    await server.heldAtLeast(1);
    answer(server.held.shift()!, String(i));
    t.is(await (await pending).body.text(), String(i));
    await untilFree(agent, server.origin, 1);
  }
  t.is(server.connections(), 1);
});

test('many held at once: each new request gets a connection of its own, then all are reused', async (t) => {
  const { server, agent } = await poolOnServer(t, 1000);
  const round = async (n: number) => {
    const pending = Array.from({ length: n }, () => request(`${server.origin}/many`, { dispatcher: agent }).then((res) => res.body.text()));
    await server.heldAtLeast(n);
    for (const res of server.held.splice(0)) answer(res, 'ok');
    t.deepEqual(new Set(await Promise.all(pending)), new Set(['ok']));
    await untilFree(agent, server.origin, n);
  };
  await round(200);
  t.is(server.connections(), 200);
  await round(200);
  t.is(server.connections(), 200, 'the second round found the 200 freed connections');
});

test('a connection reset before its answer fails that request, and the next request is answered', async (t) => {
  const { server, agent } = await poolOnServer(t, 2, { dropFirstConnection: true });
  await t.throwsAsync(request(`${server.origin}/first`, { dispatcher: agent }));
  const pending = request(`${server.origin}/second`, { dispatcher: agent });
  await server.heldAtLeast(1);
  answer(server.held.shift()!, 'second');
  t.is(await (await pending).body.text(), 'second');
  t.is(server.connections(), 2);
});

test('a connection that could not connect leaves the pool: the next request is served by a connection of the pool', async (t) => {
  const server = await heldServer();
  t.teardown(() => server.close());
  // undici's own connector, refusing the first connection the pool opens.
  const connector = buildConnector({});
  let refuse = true;
  const pool = createProviderPool(server.origin, {
    connections: 2,
    connect: (options, callback) => {
      if (!refuse) return connector(options, callback);
      refuse = false;
      callback(Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }), null);
    },
  });
  const refused: string[] = [];
  pool.on('connectionError', (_origin, _targets, error) => refused.push((error as NodeJS.ErrnoException).code ?? ''));
  await t.throwsAsync(pool.request({ path: '/first', method: 'GET' }), { code: 'ECONNREFUSED' });
  t.deepEqual(refused, ['ECONNREFUSED']);

  const pending = pool.request({ path: '/second', method: 'GET' });
  await server.heldAtLeast(1);
  // Served by a connection the pool counts and closes, not by the refused one Pool dropped.
  t.is(pool.stats.connected, 1, 'the connection serving it is one of the pool’s own');
  t.is(pool.stats.running, 1);
  answer(server.held.shift()!, 'second');
  t.is(await (await pending).body.text(), 'second');
  await pool.close();
  t.is(pool.stats.connected, 0, 'close closed it');
});
