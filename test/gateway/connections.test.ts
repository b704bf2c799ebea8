import { connect, type Socket } from 'node:net';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import { guardConnections } from '../../services/gateway/connections.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';
import { waitFor } from '../helpers/wait.js';

// One client address cannot hold the edge's sockets: open connections and idle ones per address
// are capped (configurable), and the edge server's own timeouts cut a connection that never sends
// a request and a slowloris one within a bounded, configured time.

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

test('guardConnections: idle connections beyond the per-address bound are closed oldest first; busy ones never', async (t) => {
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
    const busyState = busy.map(watchClose);
    // A third connection, idle: allowed (1 idle). A fourth: over the open-connection cap → closed at once.
    const idle = await open(port);
    const idleState = watchClose(idle);
    const fourth = await open(port);
    const fourthState = watchClose(fourth);
    await waitFor(() => fourthState.closed, 5000, 'the connection over the cap closed');
    t.false(idleState.closed);
    t.false(busyState.some((s) => s.closed), 'busy connections are never closed for being over the idle bound');
    // The held answers finish: two more idle connections → only the newest idle one may stay.
    for (const release of held.splice(0)) release();
    await waitFor(() => [idleState, ...busyState].filter((s) => s.closed).length >= 2, 5000, 'idle connections beyond 1 closed');
    t.true(idleState.closed, 'the oldest idle one went first');
    t.true(busyState[0]!.closed);
    t.false(busyState[1]!.closed, 'the newest idle connection stays');
    for (const socket of [...busy, idle, fourth]) socket.destroy();
  } finally {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});

let p: TestPlatform;
test.before(async () => {
  p = await startTestPlatform({
    env: { EDGE_MAX_CONNECTIONS_PER_ADDRESS: '4', EDGE_MAX_IDLE_CONNECTIONS_PER_ADDRESS: '4', HTTP_HEADERS_TIMEOUT_MS: '400', HTTP_KEEP_ALIVE_TIMEOUT_MS: '300' },
  });
});
test.after.always(async () => {
  await p?.stop();
});

test.serial('through the edge: a fifth connection from one address is closed at once (EDGE_MAX_CONNECTIONS_PER_ADDRESS)', async (t) => {
  const port = Number(new URL(p.url).port);
  const sockets = [await open(port), await open(port), await open(port), await open(port)];
  const states = sockets.map(watchClose);
  const fifth = await open(port);
  const fifthState = watchClose(fifth);
  await waitFor(() => fifthState.closed, 5000, 'fifth connection closed by the edge');
  t.false(states.some((s) => s.closed), 'the first four stay open (until the header timeout)');
  // They do not stay forever: no request within HTTP_HEADERS_TIMEOUT_MS → the edge closes them.
  await waitFor(() => states.every((s) => s.closed), 5000, 'never-used connections closed by the header timeout');
  t.true(sockets.every(closed));
  // Once they are gone, the address may connect again and be served.
  const res = await fetch(`${p.url}/healthz`);
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
    await waitFor(() => state.closed, 5000, 'slowloris connection cut');
    t.true(i < request.length, 'cut before the headers were complete');
  } finally {
    clearInterval(drip);
    socket.destroy();
  }
});
