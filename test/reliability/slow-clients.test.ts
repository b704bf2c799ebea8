import { connect, type Socket } from 'node:net';
import test from 'ava';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';
import { reliabilityFigures } from '../helpers/reliability-figures.js';

// Slow and oversized clients against the edge, with small header and request timeouts: a
// slowloris client, a 100 MiB body, 10,000 headers and a crowd of idle connections. Each is cut
// off with a clear status (or the connection is closed), and the edge keeps serving normal
// requests afterwards. Counts are bounded for loopback on a shared machine (IDLE_CONNECTIONS
// instead of thousands; the per-address cap is lowered to match).
const IDLE_CONNECTIONS = Number(process.env.RELIABILITY_IDLE_CONNECTIONS ?? 400);
const PER_ADDRESS_CAP = 100;
const figures = reliabilityFigures('slow-clients');
const row = figures.row('slow and oversized clients (edge)');
const tried = (family: string) => {
  row.badInputs[family] = (row.badInputs[family] ?? 0) + 1;
  row.requestsChecked++;
};

let p: TestPlatform;
let port: number;

test.before(async () => {
  p = await startTestPlatform({
    env: {
      HTTP_HEADERS_TIMEOUT_MS: '500',
      HTTP_REQUEST_TIMEOUT_MS: '2000',
      HTTP_KEEP_ALIVE_TIMEOUT_MS: '500',
      EDGE_MAX_CONNECTIONS_PER_ADDRESS: String(PER_ADDRESS_CAP),
    },
  });
  port = Number(new URL(p.url).port);
});
test.after.always(async () => {
  figures.write();
  await p?.stop();
});

function open(): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => resolve(socket));
    socket.once('error', reject);
  });
}

/** Resolves with what the server wrote once the connection closed. */
function closed(socket: Socket): Promise<string> {
  return new Promise((resolve) => {
    let received = '';
    socket.on('data', (chunk) => (received += chunk.toString('latin1')));
    socket.on('error', () => {});
    socket.once('close', () => resolve(received));
  });
}

async function stillServing(): Promise<number> {
  return (await fetch(`${p.url}/healthz`)).status;
}

test.serial('slowloris: headers trickled a byte at a time are cut off with 408', async (t) => {
  const socket = await open();
  const done = closed(socket);
  const request = 'GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: ' + 'a'.repeat(10_000);
  let i = 0;
  // The client keeps trickling; only the server's header deadline can end this.
  const trickle = setInterval(() => {
    if (!socket.destroyed) socket.write(request[i++ % request.length]!);
  }, 20);
  const received = await done;
  clearInterval(trickle);
  tried('slowloris');
  t.regex(received, /^HTTP\/1\.1 408/);
  t.is(await stillServing(), 200);
});

test.serial('a 100 MiB body is refused with 413 without being read to the end', async (t) => {
  const socket = await open();
  const done = closed(socket);
  const total = 100 * 1024 * 1024;
  socket.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${total}\r\nAuthorization: Bearer x\r\n\r\n`);
  const chunk = Buffer.alloc(64 * 1024, 'a');
  let sent = 0;
  // Write with backpressure until the server answers or closes.
  while (sent < total && !socket.destroyed && socket.writable) {
    if (!socket.write(chunk)) await new Promise<void>((resolve) => socket.once('drain', resolve).once('close', resolve));
    sent += chunk.length;
  }
  const received = await done;
  tried('100 MiB body');
  t.regex(received, /^HTTP\/1\.1 (413|401)/, received.slice(0, 200));
  t.true(sent < total, `the server stopped reading after ${sent} bytes`);
  t.is(await stillServing(), 200);
});

test.serial('10,000 headers are refused with 431', async (t) => {
  const socket = await open();
  const done = closed(socket);
  let head = 'GET /v1/models HTTP/1.1\r\nHost: x\r\n';
  for (let i = 0; i < 10_000; i++) head += `X-H-${i}: v\r\n`;
  socket.write(head + '\r\n');
  const received = await done;
  tried('10,000 headers');
  t.regex(received, /^HTTP\/1\.1 431/);
  t.is(await stillServing(), 200);
});

test.serial(`${IDLE_CONNECTIONS} idle connections from one address: those over the cap are closed at once, the rest at the header deadline; service resumes`, async (t) => {
  const sockets: Socket[] = [];
  const closings: Array<Promise<string>> = [];
  for (let i = 0; i < IDLE_CONNECTIONS; i++) {
    const socket = await open().catch(() => null);
    if (!socket) continue;
    sockets.push(socket);
    closings.push(closed(socket));
  }
  tried('idle connections');
  row.requestsChecked += IDLE_CONNECTIONS - 1;
  // Every one of them is closed by the server (none is left to hold a slot forever).
  await Promise.all(closings);
  t.true(sockets.every((s) => s.destroyed));
  t.is(await stillServing(), 200);
});
