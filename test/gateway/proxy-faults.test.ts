import test from 'ava';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { once } from 'node:events';
import { createProxy } from '../../services/gateway/proxy.js';
import { rawExchange } from '../helpers/raw-http.js';

// The proxy's error and edge-case paths on real loopback sockets: a raw TCP upstream plays the
// misbehaving service; the edge side is a plain Node server calling `forward`.

type Proxy = ReturnType<typeof createProxy>;

async function listen(server: net.Server): Promise<number> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return (server.address() as AddressInfo).port;
}

/** An upstream speaking raw TCP: `onConnection` gets each accepted socket. */
async function rawUpstream(onConnection: (socket: net.Socket) => void) {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    onConnection(socket);
  });
  const port = await listen(server);
  return {
    origin: new URL(`http://127.0.0.1:${port}`),
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

async function edgeFor(origin: URL, options: { readTimeoutMs?: number } = {}) {
  const proxy: Proxy = createProxy({ connectTimeoutMs: 1000, readTimeoutMs: options.readTimeoutMs ?? 5000 });
  const server = http.createServer((req: IncomingMessage, res: ServerResponse) => {
    const headers = proxy.upstreamHeaders(req);
    proxy.forward(req, res, { origin, path: req.url ?? '/', headers, responseHeaders: { 'x-request-id': 'req-fault' }, requestId: 'req-fault' });
  });
  const port = await listen(server);
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    async close() {
      proxy.close();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function readHeadOf(socket: net.Socket): Promise<string> {
  return new Promise((resolve) => {
    let head = '';
    const onData = (chunk: Buffer) => {
      head += chunk.toString('latin1');
      const end = head.indexOf('\r\n\r\n');
      if (end >= 0) {
        socket.off('data', onData);
        resolve(head.slice(0, end));
      }
    };
    socket.on('data', onData);
  });
}

test('an upstream that answers garbage gives a 502 error body with the request id', async (t) => {
  const upstream = await rawUpstream((socket) => {
    void readHeadOf(socket).then(() => socket.end('this is not HTTP\r\n\r\n'));
  });
  const edge = await edgeFor(upstream.origin);
  try {
    const res = await fetch(`${edge.url}/v1/x`);
    t.is(res.status, 502);
    t.is(res.headers.get('x-request-id'), 'req-fault');
    const body = (await res.json()) as { error: { type: string; request_id?: string } };
    t.is(body.error.request_id, 'req-fault');
  } finally {
    await edge.close();
    await upstream.close();
  }
});

test('an upstream that answers 101 Switching Protocols to a plain request gives a 502 error body, and its connection is closed', async (t) => {
  // The edge never forwards an Upgrade (hop-by-hop), so a 101 is the upstream misbehaving. Without
  // handling, Node's client destroys the socket and the client request was never answered.
  t.timeout(15_000, 'the edge never answered');
  const closed: Array<Promise<unknown>> = [];
  let calls = 0;
  const upstream = await rawUpstream((socket) => {
    closed.push(once(socket, 'close'));
    void readHeadOf(socket).then(() => {
      calls++;
      if (calls === 1) socket.write('HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\nafter-the-switch');
      else socket.end('HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok');
    });
  });
  const edge = await edgeFor(upstream.origin);
  try {
    const res = await fetch(`${edge.url}/v1/x`);
    t.is(res.status, 502);
    t.is(res.headers.get('x-request-id'), 'req-fault');
    const body = (await res.json()) as { error: { type: string; code: string; request_id?: string } };
    t.is(body.error.type, 'internal_error');
    t.is(body.error.code, 'upstream_error');
    t.is(body.error.request_id, 'req-fault');
    // The switched connection is not kept (nor handed to the next request): it is closed.
    await closed[0];
    const next = await fetch(`${edge.url}/v1/y`);
    t.is(next.status, 200);
    t.is(await next.text(), 'ok');
    t.is(closed.length, 2, 'the next request opened a connection of its own');
  } finally {
    await edge.close();
    await upstream.close();
  }
});

test('a 101 from the upstream while the client is still sending its body gives a 502 and closes the client connection after it', async (t) => {
  t.timeout(15_000, 'the edge never answered');
  const upstream = await rawUpstream((socket) => {
    void readHeadOf(socket).then(() => socket.write('HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: h2c\r\n\r\n'));
  });
  const edge = await edgeFor(upstream.origin);
  try {
    const socket = net.connect(edge.port, '127.0.0.1');
    socket.on('error', () => {});
    socket.write('POST /v1/x HTTP/1.1\r\nhost: e\r\ncontent-type: text/plain\r\ncontent-length: 100\r\n\r\n0123456789');
    const head = (await readHeadOf(socket)).toLowerCase();
    t.regex(head, /^http\/1\.1 502/);
    t.regex(head, /\r\nconnection: close/);
    t.regex(head, /\r\nx-request-id: req-fault/);
    socket.write('x'.repeat(90));
    await once(socket, 'close');
  } finally {
    await edge.close();
    await upstream.close();
  }
});

test('an upstream that resets the connection before answering gives a 502 error body', async (t) => {
  const upstream = await rawUpstream((socket) => {
    void readHeadOf(socket).then(() => socket.resetAndDestroy());
  });
  const edge = await edgeFor(upstream.origin);
  try {
    const res = await fetch(`${edge.url}/v1/x`);
    t.is(res.status, 502);
    const body = (await res.json()) as { error: { request_id?: string } };
    t.is(body.error.request_id, 'req-fault');
  } finally {
    await edge.close();
    await upstream.close();
  }
});

test('a refused connection gives a 502 error body', async (t) => {
  const closed = net.createServer();
  const port = await listen(closed);
  await new Promise<void>((resolve) => closed.close(() => resolve()));
  const edge = await edgeFor(new URL(`http://127.0.0.1:${port}`));
  try {
    const res = await fetch(`${edge.url}/v1/x`);
    t.is(res.status, 502);
    t.regex(res.headers.get('content-type') ?? '', /application\/json/);
  } finally {
    await edge.close();
  }
});

test('an answer read until close (no length, not chunked) is relayed whole', async (t) => {
  const upstream = await rawUpstream((socket) => {
    void readHeadOf(socket).then(() => socket.end('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\nhello, until close'));
  });
  const edge = await edgeFor(upstream.origin);
  try {
    const res = await fetch(`${edge.url}/v1/x`);
    t.is(res.status, 200);
    t.is(await res.text(), 'hello, until close');
  } finally {
    await edge.close();
    await upstream.close();
  }
});

test('hop-by-hop response headers, and those Connection names, are not relayed to the client', async (t) => {
  const upstream = await rawUpstream((socket) => {
    void readHeadOf(socket).then(() =>
      socket.write(
        'HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: keep-alive, x-upstream-hop\r\nx-upstream-hop: 1\r\nkeep-alive: timeout=77\r\nproxy-authenticate: Basic\r\ntrailer: x-t\r\nupgrade: h2c\r\nx-kept: yes\r\n\r\nok',
      ),
    );
  });
  const edge = await edgeFor(upstream.origin);
  try {
    const socket = net.connect(edge.port, '127.0.0.1');
    socket.write('GET /v1/x HTTP/1.1\r\nhost: edge\r\n\r\n');
    const head = (await readHeadOf(socket)).toLowerCase();
    socket.destroy();
    t.regex(head, /^http\/1\.1 200/);
    t.regex(head, /\r\nx-kept: yes/);
    t.notRegex(head, /timeout=77/);
    for (const name of ['x-upstream-hop', 'proxy-authenticate', 'trailer', 'upgrade']) t.notRegex(head, new RegExp(`\\r\\n${name}:`), name);
  } finally {
    await edge.close();
    await upstream.close();
  }
});

test('HEAD, 204 and 304 answers carry no body and leave the connection usable', async (t) => {
  const upstream = http.createServer((req, res) => {
    if (req.url === '/204') res.writeHead(204).end();
    else if (req.url === '/304') res.writeHead(304, { etag: '"a"' }).end();
    else res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '5' }).end('hello');
  });
  const port = await listen(upstream);
  const edge = await edgeFor(new URL(`http://127.0.0.1:${port}`));
  try {
    const answer = await rawExchange(
      edge.port,
      'HEAD /x HTTP/1.1\r\nhost: e\r\n\r\nGET /204 HTTP/1.1\r\nhost: e\r\n\r\nGET /304 HTTP/1.1\r\nhost: e\r\n\r\nGET /x HTTP/1.1\r\nhost: e\r\nconnection: close\r\n\r\n',
    );
    const statuses = [...answer.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => m[1]);
    t.deepEqual(statuses, ['200', '204', '304', '200']);
    t.is(answer.split('hello').length, 2, 'only the GET carries the body');
  } finally {
    await edge.close();
    upstream.closeAllConnections();
    await new Promise<void>((resolve) => upstream.close(() => resolve()));
  }
});

test('a client that disconnects mid-stream closes the upstream request', async (t) => {
  let upstreamClosed!: Promise<unknown>;
  let upstreamRes!: http.ServerResponse;
  const opened = new Promise<void>((resolve) => {
    const server = http.createServer((req, res) => {
      upstreamRes = res;
      upstreamClosed = once(res, 'close');
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: 1\n\n');
      resolve();
    });
    void listen(server).then((port) => (streamServer = { server, port }));
  });
  let streamServer!: { server: http.Server; port: number };
  while (!streamServer) await new Promise((r) => setImmediate(r));
  const edge = await edgeFor(new URL(`http://127.0.0.1:${streamServer.port}`));
  try {
    const socket = net.connect(edge.port, '127.0.0.1');
    socket.on('error', () => {});
    socket.write('GET /stream HTTP/1.1\r\nhost: e\r\n\r\n');
    await opened;
    await once(socket, 'data');
    socket.destroy();
    await upstreamClosed;
    t.false(upstreamRes.writableFinished, 'the upstream stream was cut, not finished');
  } finally {
    await edge.close();
    streamServer.server.closeAllConnections();
    await new Promise<void>((resolve) => streamServer.server.close(() => resolve()));
  }
});

test('an upstream failure answered before the body arrived closes the connection after the 502', async (t) => {
  const closed = net.createServer();
  const port = await listen(closed);
  await new Promise<void>((resolve) => closed.close(() => resolve()));
  const edge = await edgeFor(new URL(`http://127.0.0.1:${port}`));
  try {
    const socket = net.connect(edge.port, '127.0.0.1');
    socket.on('error', () => {});
    socket.write('POST /v1/x HTTP/1.1\r\nhost: e\r\ncontent-type: text/plain\r\ncontent-length: 100\r\n\r\n0123456789');
    const head = (await readHeadOf(socket)).toLowerCase();
    t.regex(head, /^http\/1\.1 502/);
    // The unread rest of the body must not be taken for the next request on this connection.
    t.regex(head, /\r\nconnection: close/);
    socket.write('x'.repeat(90) + 'GET /second HTTP/1.1\r\nhost: e\r\n\r\n');
    await once(socket, 'close');
  } finally {
    await edge.close();
  }
});

test('an upstream that stops answering gives a 504 error body', async (t) => {
  const upstream = await rawUpstream(() => {});
  const edge = await edgeFor(upstream.origin, { readTimeoutMs: 50 });
  try {
    const res = await fetch(`${edge.url}/v1/x`);
    t.is(res.status, 504);
    const body = (await res.json()) as { error: { request_id?: string } };
    t.is(body.error.request_id, 'req-fault');
  } finally {
    await edge.close();
    await upstream.close();
  }
});

test('an upstream that resets mid-body cuts the client connection instead of hanging or finishing it', async (t) => {
  const upstream = await rawUpstream((socket) => {
    void readHeadOf(socket).then(() => {
      socket.write('HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 100\r\n\r\npartial', () => socket.resetAndDestroy());
    });
  });
  const edge = await edgeFor(upstream.origin);
  try {
    const res = await fetch(`${edge.url}/v1/x`);
    t.is(res.status, 200);
    await t.throwsAsync(res.text());
  } finally {
    await edge.close();
    await upstream.close();
  }
});

test('a client that disconnects mid-body aborts the upstream request', async (t) => {
  let upstreamReq!: IncomingMessage;
  const upstreamServer = http.createServer();
  const reached = new Promise<void>((resolve) => {
    upstreamServer.on('request', (req: IncomingMessage) => {
      upstreamReq = req;
      req.once('data', () => resolve());
    });
  });
  const port = await listen(upstreamServer);
  const edge = await edgeFor(new URL(`http://127.0.0.1:${port}`));
  try {
    const socket = net.connect(edge.port, '127.0.0.1');
    socket.on('error', () => {});
    socket.write('POST /v1/x HTTP/1.1\r\nhost: e\r\ncontent-length: 1000\r\n\r\nfirst-bytes');
    await reached;
    upstreamReq.on('error', () => {}); // 'aborted', the point of the test
    const closedUpstream = new Promise<void>((resolve) => upstreamReq.once('close', () => resolve()));
    socket.destroy();
    await closedUpstream;
    t.false(upstreamReq.complete);
  } finally {
    await edge.close();
    upstreamServer.closeAllConnections();
    await new Promise<void>((resolve) => upstreamServer.close(() => resolve()));
  }
});
