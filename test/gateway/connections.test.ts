import { connect, type Socket } from 'node:net';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import { connectionsForOpenFileLimit, guardConnections } from '../../services/gateway/connections.js';
import { listenBacklog, somaxconn } from '../helpers/listen-backlog.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';
import { waitFor } from '../helpers/wait.js';

// One client address cannot hold the edge's sockets: open connections and kept ones per address
// are capped (configurable), without ever cutting a kept-alive connection from under a client that
// may be reusing it, and the edge server's own timeouts cut a connection that never sends a
// request and a slowloris one within a bounded, configured time.

function open(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => resolve(socket));
    socket.once('error', reject);
  });
}

const closed = (socket: Socket) => socket.destroyed || socket.readyState === 'closed';
function watchClose(socket: Socket): { closed: boolean } {
  const state = { closed: false };
  socket.once('close', () => (state.closed = true));
  socket.on('error', () => {});
  socket.resume(); // read what the server sends, so its close is seen
  return state;
}

/** Everything the server writes on `socket`, as it arrives. */
function received(socket: Socket): { text: string } {
  const state = { text: '' };
  socket.on('data', (chunk) => (state.text += chunk.toString('latin1')));
  return state;
}

test('guardConnections: beyond the per-address bound, answers say Connection: close and never-used connections are closed oldest first; busy ones never', async (t) => {
  const held: Array<() => void> = [];
  const server: Server = createServer((_req, res) => held.push(() => res.end('ok')));
  guardConnections(server, { maxPerAddress: 3, maxIdlePerAddress: 1, ipv6PrefixLength: 64, isTrusted: () => false });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  try {
    // Two busy connections (a request each, held by the handler), opened one after the other.
    const busy: Socket[] = [];
    for (let i = 1; i <= 2; i++) {
      const socket = await open(port);
      busy.push(socket);
      socket.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
      await waitFor(() => held.length === i, 5000, `request ${i} in flight`);
    }
    const answers = busy.map(received);
    const busyState = busy.map(watchClose);
    // A third connection, never used: allowed (1 kept). A fourth: over the open-connection cap → closed at once.
    const idle = await open(port);
    const idleState = watchClose(idle);
    const fourth = await open(port);
    const fourthState = watchClose(fourth);
    await waitFor(() => fourthState.closed, 5000, 'the connection over the cap closed');
    t.false(idleState.closed);
    t.false(busyState.some((s) => s.closed), 'busy connections are never closed for being over the bound');
    // The held answers finish. The first connection is the one the address may keep; the second
    // was beyond the bound when its request came, so its answer tells the client to close it.
    for (const release of held.splice(0)) release();
    await waitFor(() => busyState[1]!.closed, 5000, 'the connection beyond the bound closed after its answer');
    t.regex(answers[1]!.text, /^HTTP\/1\.1 200[^]*\r\nConnection: close\r\n[^]*ok$/i, 'the answer arrived whole, saying close');
    await waitFor(() => answers[0]!.text.endsWith('ok'), 5000, 'first answer');
    t.regex(answers[0]!.text, /\r\nConnection: keep-alive\r\n/i);
    t.false(busyState[0]!.closed, 'the kept connection stays open for the next request');
    // A second never-used connection: one never-used connection is the most an address keeps → the oldest goes.
    const fifth = await open(port);
    const fifthState = watchClose(fifth);
    await waitFor(() => idleState.closed, 5000, 'the oldest never-used connection closed');
    t.false(fifthState.closed);
    t.false(busyState[0]!.closed, 'a connection that has answered is never closed from under its client');
    for (const socket of [...busy, idle, fourth, fifth]) socket.destroy();
  } finally {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});

test('guardConnections: a client pool of 100 keep-alive connections from one address (over the bound of 32) never sees a failed request', async (t) => {
  const server: Server = createServer((_req, res) => setImmediate(() => res.end('ok')));
  const guard = guardConnections(server, { maxPerAddress: 256, maxIdlePerAddress: 32, ipv6PrefixLength: 64, isTrusted: () => false });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  try {
    // fetch's pool reuses a connection as soon as its answer has arrived. Closing kept connections
    // beyond the bound from the server side raced that reuse ("fetch failed", ECONNRESET): about
    // 2.5 % of these requests failed before answers started saying Connection: close.
    const failures: string[] = [];
    let answered = 0;
    await Promise.all(
      Array.from({ length: 100 }, async () => {
        for (let i = 0; i < 20; i++) {
          try {
            t.is(await (await fetch(url)).text(), 'ok');
            answered++;
          } catch (error) {
            const cause = (error as { cause?: { code?: string; message?: string } }).cause;
            failures.push(String(cause?.code ?? cause?.message ?? error));
          }
        }
      }),
    );
    t.deepEqual(failures, []);
    t.is(answered, 2000);
    // What the address keeps afterwards is within the bound (the rest closed after their answers).
    await waitFor(() => guard.openFrom('127.0.0.1') <= 32, 10_000, 'kept connections within the bound');
  } finally {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});

test('guardConnections: a request on a connection beyond maxOpen (counting every address, trusted ones too) is answered 503 in the error shape and that connection closes; the server never sees it, and a connection within the bound is served again once one closes', async (t) => {
  const held: Array<() => void> = [];
  const server: Server = createServer((_req, res) => held.push(() => res.end('ok')));
  const guard = guardConnections(server, { maxOpen: 2, maxPerAddress: 100, maxIdlePerAddress: 100, ipv6PrefixLength: 64, isTrusted: () => true });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  try {
    const busy = await open(port);
    const busyAnswer = received(busy);
    busy.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
    await waitFor(() => held.length === 1, 5000, 'first request in flight');
    const idle = await open(port);
    const idleState = watchClose(idle);
    const third = await open(port);
    const answer = received(third);
    const thirdState = watchClose(third);
    third.write('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}');
    await waitFor(() => thirdState.closed, 5000, 'the connection over the bound closed after its answer');
    const [status, ...lines] = answer.text.split('\r\n\r\n')[0]!.split('\r\n');
    const body = answer.text.split('\r\n\r\n')[1];
    t.regex(status!, /^HTTP\/1\.1 503 /);
    const header = (name: string) => lines.find((l) => l.toLowerCase().startsWith(`${name}: `))?.slice(name.length + 2);
    t.is(header('connection'), 'close');
    t.is(header('retry-after'), '1');
    const requestId = header('x-request-id');
    t.truthy(requestId);
    const error = (JSON.parse(body!) as { error: Record<string, unknown> }).error;
    t.like(error, { code: 'server_busy', param: null, request_id: requestId });
    t.is(typeof error.message, 'string');
    t.is(held.length, 1, "the server's own handler never saw the request");
    t.false(idleState.closed, 'connections within the bound are untouched');
    t.is(guard.open, 2);
    // One closes: the next connection is within the bound and served.
    idle.destroy();
    await waitFor(() => guard.open === 1, 5000, 'the closed connection uncounted');
    const next = await open(port);
    const nextAnswer = received(next);
    next.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
    await waitFor(() => held.length === 2, 5000, 'the next connection reached the server');
    for (const release of held.splice(0)) release();
    await waitFor(() => nextAnswer.text.endsWith('ok') && busyAnswer.text.endsWith('ok'), 5000, 'both answered');
    t.regex(nextAnswer.text, /^HTTP\/1\.1 200 /);
    for (const socket of [busy, next]) socket.destroy();
  } finally {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});

test('guardConnections: connections beyond maxOpen still count against their address, so one address cannot hold more of them than its per-address bound', async (t) => {
  const server: Server = createServer((_req, res) => res.end('ok'));
  const guard = guardConnections(server, { maxOpen: 1, maxPerAddress: 2, maxIdlePerAddress: 10, ipv6PrefixLength: 64, isTrusted: () => false });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  try {
    const within = await open(port);
    const over = await open(port);
    const overState = watchClose(over);
    const third = await open(port);
    const thirdState = watchClose(third);
    await waitFor(() => thirdState.closed, 5000, 'the third connection from the address closed at once');
    t.false(overState.closed, 'the connection over the bound waits for its request');
    t.is(guard.refused, 1);
    t.is(guard.openFrom('127.0.0.1'), 2);
    for (const socket of [within, over]) socket.destroy();
  } finally {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});

test('connectionsForOpenFileLimit: half of the soft open-file limit after a reserve of 512; no bound where the limit is unlimited or unreadable', (t) => {
  const limits = (soft: string) =>
    `Limit                     Soft Limit           Hard Limit           Units\nMax processes             unlimited            unlimited            processes\nMax open files            ${soft}                1048576              files\n`;
  t.is(connectionsForOpenFileLimit(limits('20000')), 9744);
  t.is(connectionsForOpenFileLimit(limits('1048576')), 524032);
  t.is(connectionsForOpenFileLimit(limits('600')), 44);
  t.is(connectionsForOpenFileLimit(limits('100')), 1, 'a limit below the reserve still admits one connection');
  t.is(connectionsForOpenFileLimit(limits('unlimited')), undefined);
  t.is(connectionsForOpenFileLimit(''), undefined);
  // A request that holds its client's socket and a hundredth of a shared provider connection (HTTP/2).
  t.is(connectionsForOpenFileLimit(limits('20000'), 1.01), 19295);
  // This process's own limit (Linux): a number.
  t.true(Number.isInteger(connectionsForOpenFileLimit()));
});

let p: TestPlatform;
test.before(async () => {
  p = await startTestPlatform({
    env: { EDGE_MAX_CONNECTIONS_PER_ADDRESS: '4', EDGE_MAX_IDLE_CONNECTIONS_PER_ADDRESS: '4', HTTP_HEADERS_TIMEOUT_MS: '1500', HTTP_KEEP_ALIVE_TIMEOUT_MS: '300' },
  });
});
test.after.always(async () => {
  await p?.stop();
});

test.serial('the edge listens with a backlog of HTTP_LISTEN_BACKLOG (4096 unless set; the kernel caps it at somaxconn), not Node\'s 511', (t) => {
  t.is(listenBacklog(Number(new URL(p.url).port)), Math.min(4096, somaxconn()));
});

test.serial('through the edge: a fifth connection from one address is closed at once (EDGE_MAX_CONNECTIONS_PER_ADDRESS)', async (t) => {
  const port = Number(new URL(p.url).port);
  const sockets = [await open(port), await open(port), await open(port), await open(port)];
  const states = sockets.map(watchClose);
  const fifth = await open(port);
  const fifthState = watchClose(fifth);
  // The order the connections close in, from their close events (not a look at one moment, which
  // a stall longer than the header timeout would turn into a failure).
  const closeOrder: string[] = [];
  sockets.forEach((socket, i) => socket.once('close', () => closeOrder.push(`connection ${i + 1}`)));
  fifth.once('close', () => closeOrder.push('fifth'));
  await waitFor(() => fifthState.closed, 10_000, 'fifth connection closed by the edge');
  // They do not stay forever: no request within HTTP_HEADERS_TIMEOUT_MS → the edge closes them.
  await waitFor(() => states.every((s) => s.closed), 10_000, 'never-used connections closed by the header timeout');
  t.true(sockets.every(closed));
  t.is(closeOrder[0], 'fifth', `the fifth is closed at once, the first four only by the header timeout: ${closeOrder.join(', ')}`);
  t.is(closeOrder.length, 5);
  // Once they are gone, the address may connect again and be served. The client can see its side
  // closed before the edge has counted the connection gone (its close event comes later), and a
  // connection made in between is still the fifth: so this is tried until the edge serves it.
  const res = await waitFor(() => fetch(`${p.url}/healthz`).catch(() => null), 5000, 'the address served again');
  t.is(res.status, 200);
});

test.serial('through the edge: a slowloris connection (one header byte at a time) is cut within the configured header timeout', async (t) => {
  const port = Number(new URL(p.url).port);
  const socket = await open(port);
  const state = watchClose(socket);
  const request = 'GET /healthz HTTP/1.1\r\nHost: edge\r\nX-Slow: ' + 'a'.repeat(200);
  let i = 0;
  const drip = setInterval(() => {
    if (state.closed || i >= request.length) return clearInterval(drip);
    socket.write(request[i++]!);
  }, 50);
  try {
    await waitFor(() => state.closed, 10_000, 'slowloris connection cut');
    t.true(i < request.length, 'cut before the headers were complete');
  } finally {
    clearInterval(drip);
    socket.destroy();
  }
});
