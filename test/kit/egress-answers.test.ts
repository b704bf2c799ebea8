import diagnostics from 'node:diagnostics_channel';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import { createEgressGuard, EgressRefusedError, type Resolver } from '../../services/kit/index.js';

// What the egress guard says when it refuses (never a URL's path or query, where tokens live),
// which of a name's addresses it connects to, and how much of an answer it reads for a caller that
// decides on the status line (webhooks).

const fakeDns = (table: Record<string, string[]>): Resolver => async (host) => {
  const answers = table[host];
  if (!answers) throw Object.assign(new Error('ENOTFOUND'), { code: 'ENOTFOUND' });
  return answers.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
};

async function server(handler: http.RequestListener, host = '127.0.0.1'): Promise<{ port: number; close(): Promise<void> }> {
  const s = http.createServer(handler);
  await new Promise<void>((resolve) => s.listen(0, host, resolve));
  return {
    port: (s.address() as AddressInfo).port,
    close: () => {
      s.closeAllConnections();
      return new Promise((r) => s.close(() => r()));
    },
  };
}

test('a refusal names the scheme and host only: never the path, query or credentials of the URL', async (t) => {
  const guard = createEgressGuard({ resolver: fakeDns({ 'hooks.example.test': ['10.0.0.5'] }) });
  const urls = [
    'https://hooks.example.test:8443/services/T0001/B0001/TOPSECRETTOKEN?sig=QUERYSECRET',
    'http://169.254.169.254/latest/meta-data/TOPSECRETTOKEN',
    'https://user:PASSWORDSECRET@hooks.example.test/x',
    'ftp://hooks.example.test/TOPSECRETTOKEN',
    'https://nowhere.example.test/TOPSECRETTOKEN',
  ];
  for (const url of urls) {
    const error = await t.throwsAsync(guard.request(url, { method: 'POST' }), { instanceOf: EgressRefusedError });
    // Everything a logger would print of the error (pino copies its enumerable properties).
    const printed = JSON.stringify({ ...error, message: error!.message, stack: error!.stack });
    t.notRegex(printed, /SECRET/, url);
    t.notRegex(printed, /T0001|meta-data/, url);
  }
  const first = await t.throwsAsync(guard.request(urls[0]!), { instanceOf: EgressRefusedError });
  t.is(first!.destination, 'https://hooks.example.test:8443');
  t.is(first!.message, 'refused destination https://hooks.example.test:8443: resolves to a private or special-purpose IPv4 address');
});

test('a name with several addresses: a connection that cannot be made moves on to the next address, every one checked', async (t) => {
  let requests = 0;
  // Listens on 127.0.0.1 only: 127.0.0.2 (the name's first answer) refuses the connection, like a
  // dual-stack host whose AAAA endpoint is broken.
  const receiver = await server((req, res) => {
    requests++;
    req.resume();
    req.on('end', () => res.end('reached'));
  });
  t.teardown(() => receiver.close());
  const guard = createEgressGuard({
    allowHosts: ['127.0.0.0/8'],
    resolver: fakeDns({ 'dual.test': ['127.0.0.2', '127.0.0.1'], 'broken.test': ['127.0.0.2', '127.0.0.3'], 'half.test': ['127.0.0.1', '10.0.0.5'] }),
  });
  const res = await guard.request(`http://dual.test:${receiver.port}/hook`, { method: 'POST', body: '{"a":1}', timeoutMs: 5000 });
  t.is(res.status, 200);
  t.is(res.body.toString(), 'reached');
  t.is(requests, 1, 'the POST was made once, on the address that connected');
  // Every address refuses: the last error is the answer.
  const refusedAll = await t.throwsAsync(guard.request(`http://broken.test:${receiver.port}/`, { timeoutMs: 5000 }));
  t.is((refusedAll as NodeJS.ErrnoException).code, 'ECONNREFUSED');
  // An answer the guard refuses refuses the name, whatever the order: no address of it is tried.
  await t.throwsAsync(guard.request(`http://half.test:${receiver.port}/`), { instanceOf: EgressRefusedError });
  t.is(requests, 1);
  const checked = await guard.check(`http://dual.test:${receiver.port}/`);
  t.deepEqual(checked.addresses.map((a) => a.address), ['127.0.0.2', '127.0.0.1']);
  t.is(checked.address, '127.0.0.2');
});

test('once connected, an error is final: the next address is not tried (the request may have been received)', async (t) => {
  let hits = 0;
  const dropper = await server((req) => {
    hits++;
    req.socket.destroy();
  });
  t.teardown(() => dropper.close());
  // Both answers reach the same server; a retry on the second would be a second request.
  const guard = createEgressGuard({ allowHosts: ['127.0.0.0/8'], resolver: fakeDns({ 'drop.test': ['127.0.0.1', '127.0.0.1'] }) });
  const error = await t.throwsAsync(guard.request(`http://drop.test:${dropper.port}/`, { method: 'POST', body: 'x', timeoutMs: 5000 }));
  t.is((error as NodeJS.ErrnoException).code, 'ECONNRESET');
  t.is(hits, 1);
});

test('bodyPrefixBytes: an endless body is read up to the prefix and the connection closed; no size error', async (t) => {
  let closed!: () => void;
  const serverSawClose = new Promise<void>((resolve) => (closed = resolve));
  const endless = await server((req, res) => {
    req.resume();
    res.writeHead(200, { 'content-type': 'application/octet-stream' });
    const chunk = Buffer.alloc(64 * 1024, 0x61);
    const pump = () => {
      while (!res.destroyed && res.write(chunk));
    };
    res.on('drain', pump);
    res.on('close', closed);
    pump();
  });
  t.teardown(() => endless.close());
  const guard = createEgressGuard({ allowHosts: ['127.0.0.1'] });
  const res = await guard.request(`http://127.0.0.1:${endless.port}/`, { method: 'POST', body: '{}', bodyPrefixBytes: 512, maxBytes: 1024, timeoutMs: 30_000 });
  t.is(res.status, 200);
  t.is(res.body.length, 512);
  t.true(res.truncated);
  // The guard hung up instead of reading the rest.
  t.true(await serverSawClose.then(() => true), 'the server saw the connection closed');
});

test.serial('bodyPrefixBytes: a body still coming when the signal fires, or cut by the connection, ends the answer with what arrived; before the status line it is an error', async (t) => {
  const slow = await server((req, res) => {
    req.resume();
    if (req.url === '/no-status') return; // never answers
    res.writeHead(202, { 'content-type': 'text/plain' });
    // '/cut': the connection is lost after the first bytes; otherwise the body never ends.
    res.write('partial', () => (req.url === '/cut' ? res.socket?.destroy() : undefined));
  });
  t.teardown(() => slow.close());
  const guard = createEgressGuard({ allowHosts: ['127.0.0.1'] });
  const opts = { method: 'POST', body: '{}', bodyPrefixBytes: 512, timeoutMs: 30_000 };

  // The signal fires once the status line is in (Node announces each client response on this channel).
  const controller = new AbortController();
  const onResponse = () => setImmediate(() => controller.abort());
  diagnostics.subscribe('http.client.response.finish', onResponse);
  t.teardown(() => diagnostics.unsubscribe('http.client.response.finish', onResponse));
  const res = await guard.request(`http://127.0.0.1:${slow.port}/hang`, { ...opts, signal: controller.signal });
  diagnostics.unsubscribe('http.client.response.finish', onResponse);
  t.is(res.status, 202);
  t.true(res.truncated);
  t.true('partial'.startsWith(res.body.toString()));

  const cut = await guard.request(`http://127.0.0.1:${slow.port}/cut`, opts);
  t.is(cut.status, 202);
  t.true(cut.truncated);
  t.is(cut.body.toString(), 'partial');

  // No status line yet: the abort is an error, as without the option.
  const other = new AbortController();
  const requested = new Promise<void>((resolve) => diagnostics.subscribe('http.client.request.start', function started() {
    diagnostics.unsubscribe('http.client.request.start', started);
    resolve();
  }));
  const failing = guard.request(`http://127.0.0.1:${slow.port}/no-status`, { ...opts, signal: other.signal });
  await requested;
  other.abort();
  const error = await t.throwsAsync(failing);
  t.is(error!.name, 'AbortError');
});
