import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import test from 'ava';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';
import { startEdgeProcess } from '../helpers/process.js';
import { reliabilityFigures } from '../helpers/reliability-figures.js';

// Slow and oversized clients against the edge, with small header and request timeouts: a
// slowloris client, a 100 MiB body, 10,000 headers, and 5,000 idle connections against an edge in
// its own process. Each is cut off with a clear status (or the connection is closed), and the edge
// keeps serving normal requests meanwhile and afterwards.
const IDLE_CONNECTIONS = Number(process.env.RELIABILITY_IDLE_CONNECTIONS ?? 5000);
/** Client addresses the idle connections come from (127.1.0.1 to 127.1.0.200, on loopback): 25 each by default. */
const IDLE_ADDRESSES = 200;
const idleAddress = (i: number) => `127.1.${Math.floor((i % IDLE_ADDRESSES) / 250)}.${1 + ((i % IDLE_ADDRESSES) % 250)}`;
/** Long enough to open every connection and be served before the first one times out, on a loaded machine. */
const IDLE_HEADER_TIMEOUT_MS = 12_000;
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

function open(to = port, from?: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port: to, host: '127.0.0.1', localAddress: from }, () => resolve(socket));
    socket.once('error', reject);
  });
}

/** Resident memory of a process (Linux), for the log. */
function residentKiB(pid: number): number | null {
  const match = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return match ? Number(match[1]) : null;
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

test.serial(`${IDLE_CONNECTIONS} idle connections from ${IDLE_ADDRESSES} addresses against an edge process: the edge serves while holding them, then closes each with 408 at its header deadline`, async (t) => {
  // The edge in its own process (as deployed), so its sockets and this test's are counted apart
  // (20,000 descriptors per process here). Each address stays within the default caps (256 open,
  // 32 kept), so nothing is refused at once: every connection is held until the edge's own timeout.
  const upstream = createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"openapi":"3.1.0"}'));
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  const upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
  t.teardown(() => {
    upstream.closeAllConnections();
    upstream.close();
  });
  const edge = await startEdgeProcess(t, upstreamUrl, {
    LOG_LEVEL: 'warn',
    HTTP_HEADERS_TIMEOUT_MS: String(IDLE_HEADER_TIMEOUT_MS),
    EDGE_RATE_LIMIT_IP_PER_MINUTE: '100000',
  });
  const sockets: Socket[] = [];
  t.teardown(() => {
    for (const socket of sockets) socket.destroy();
  });
  const rssBefore = residentKiB(edge.child.process.pid!);

  const closings: Array<Promise<string>> = [];
  let closedEarly = 0;
  const opened = Date.now();
  // A bounded number of handshakes at a time: the listen backlog (511) is not the thing under test.
  for (let first = 0; first < IDLE_CONNECTIONS; first += 250) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(250, IDLE_CONNECTIONS - first) }, (_, i) => open(edge.port, idleAddress(first + i))),
    );
    for (const socket of batch) {
      sockets.push(socket);
      const done = closed(socket);
      closings.push(done);
      void done.then(() => closedEarly++);
    }
  }
  const openedInMs = Date.now() - opened;
  tried('idle connections');
  t.is(sockets.length, IDLE_CONNECTIONS);

  // While every one of them is held, the edge still serves: a probe and a proxied request.
  t.is((await fetch(`${edge.url}/healthz`)).status, 200);
  const proxied = await fetch(`${edge.url}/openapi.json`);
  t.is(proxied.status, 200);
  t.deepEqual(await proxied.json(), { openapi: '3.1.0' });
  t.is(closedEarly, 0, `all ${IDLE_CONNECTIONS} were still open while the edge served (opened in ${openedInMs} ms, header timeout ${IDLE_HEADER_TIMEOUT_MS} ms)`);
  const rssHeld = residentKiB(edge.child.process.pid!);
  row.requestsChecked += 3;

  // None is left to hold a slot: each is answered 408 and closed by the edge's header deadline.
  const received = await Promise.all(closings);
  const statuses = new Map<string, number>();
  for (const text of received) {
    const status = /^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 'closed without an answer';
    statuses.set(status, (statuses.get(status) ?? 0) + 1);
  }
  t.deepEqual([...statuses], [['408', IDLE_CONNECTIONS]]);
  row.requestsChecked += IDLE_CONNECTIONS;
  t.is((await fetch(`${edge.url}/healthz`)).status, 200, 'and it serves afterwards');
  t.log(`${IDLE_CONNECTIONS} connections from ${IDLE_ADDRESSES} addresses opened in ${openedInMs} ms; edge RSS ${rssBefore} KiB before, ${rssHeld} KiB while holding them`);
});
