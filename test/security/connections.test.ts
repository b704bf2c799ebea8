import { connect, type Socket } from 'node:net';
import test from 'ava';
import { createServiceApp, listen, parseSize, type RunningServer, type UserDirectory } from '../../services/kit/index.js';
import { createLogger } from '../../services/kit/logger.js';

/**
 * Every service server bounds its connections: one that never sends a request, one that sends its
 * headers a byte at a time (slowloris), and an idle keep-alive connection are all closed by the
 * server itself. Without the bounds, each would stay open for a minute or more.
 */

const users: UserDirectory = { resolve: async (c) => ({ ...c, isAdmin: false, isGuest: false }), invalidate: () => {} };
let server: RunningServer;

test.before(async () => {
  const app = createServiceApp({
    name: 'connections-test',
    logger: createLogger({ level: 'silent', name: 't' }),
    users,
    bodyLimit: parseSize('1mb'),
  });
  server = await listen(app, {
    host: '127.0.0.1',
    port: 0,
    timeouts: { keepAliveTimeoutMs: 300, headersTimeoutMs: 400, requestTimeoutMs: 1000 },
  });
});
test.after.always(() => server?.close(0));

function open(): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(server.port, '127.0.0.1', () => resolve(socket));
    socket.once('error', reject);
  });
}

/** Resolves with what the server wrote once it closed the connection. */
function closedByServer(socket: Socket): Promise<string> {
  return new Promise((resolve) => {
    let received = '';
    socket.on('data', (chunk) => (received += chunk.toString()));
    socket.on('error', () => {});
    socket.once('close', () => resolve(received));
  });
}

test('a connection that never sends a request is closed', async (t) => {
  const socket = await open();
  await closedByServer(socket);
  t.true(socket.destroyed);
});

test('headers sent a byte at a time (slowloris) are cut off with 408', async (t) => {
  const socket = await open();
  const closed = closedByServer(socket);
  const request = 'GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ' + 'a'.repeat(10_000);
  let i = 0;
  // The client keeps trickling bytes; only the server's header deadline can end this.
  const trickle = setInterval(() => {
    if (!socket.destroyed) socket.write(request[i++ % request.length]!);
  }, 20);
  const received = await closed;
  clearInterval(trickle);
  t.regex(received, /^HTTP\/1\.1 408/);
});

test('an idle keep-alive connection is closed after a request', async (t) => {
  const socket = await open();
  const closed = closedByServer(socket);
  socket.write('GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n');
  const received = await closed;
  t.regex(received, /^HTTP\/1\.1 200/);
});
