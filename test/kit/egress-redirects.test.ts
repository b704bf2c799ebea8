import http from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import { blockedReason, createEgressGuard, EgressRefusedError, type Resolver } from '../../services/kit/index.js';

// What a redirect carries on to its next hop (credentials stay with their origin; a request turned
// into a GET loses the headers of its body), and scoped IPv6 answers (`%zone`).

const fakeDns = (table: Record<string, string[]>): Resolver => async (host) => {
  const answers = table[host];
  if (!answers) throw Object.assign(new Error('ENOTFOUND'), { code: 'ENOTFOUND' });
  return answers.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
};

interface Seen {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
}

async function server(t: import('ava').ExecutionContext, handler: (req: http.IncomingMessage, res: http.ServerResponse) => void) {
  const seen: Seen[] = [];
  const s = http.createServer((req, res) => {
    seen.push({ method: req.method!, url: req.url!, headers: req.headers });
    req.resume();
    req.on('end', () => handler(req, res));
  });
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    s.closeAllConnections();
    return new Promise<void>((r) => s.close(() => r()));
  });
  return { port: (s.address() as AddressInfo).port, seen };
}

test('a redirect to another origin drops Authorization, Proxy-Authorization and Cookie; one within the origin keeps them', async (t) => {
  const target = await server(t, (_req, res) => res.end('landed'));
  const redirector = await server(t, (req, res) => {
    if (req.url === '/cross') return res.writeHead(302, { location: `http://other.test:${target.port}/landing` }).end();
    if (req.url === '/same') return res.writeHead(302, { location: '/landing' }).end();
    res.end('landed here');
  });
  // Both names are allowed and answer loopback: two origins, both reachable.
  const guard = createEgressGuard({ allowHosts: ['same.test', 'other.test'], resolver: fakeDns({ 'same.test': ['127.0.0.1'], 'other.test': ['127.0.0.1'] }) });
  const headers = { Authorization: 'Bearer SECRET', 'proxy-authorization': 'Basic SECRET', Cookie: 'session=SECRET', 'X-Trace': 'kept' };

  const crossed = await guard.request(`http://same.test:${redirector.port}/cross`, { headers, timeoutMs: 5000 });
  t.is(crossed.body.toString(), 'landed');
  t.is(target.seen.length, 1);
  const landed = target.seen[0]!.headers;
  t.is(landed.authorization, undefined);
  t.is(landed['proxy-authorization'], undefined);
  t.is(landed.cookie, undefined);
  t.is(landed['x-trace'], 'kept');
  // The first hop had them: they were the caller's, for that origin.
  t.is(redirector.seen[0]!.headers.authorization, 'Bearer SECRET');

  const same = await guard.request(`http://same.test:${redirector.port}/same`, { headers, timeoutMs: 5000 });
  t.is(same.body.toString(), 'landed here');
  const second = redirector.seen.at(-1)!;
  t.is(second.url, '/landing');
  t.is(second.headers.authorization, 'Bearer SECRET');
  t.is(second.headers.cookie, 'session=SECRET');
});

test('a POST redirected with 303 (or 301/302) becomes a GET without the headers that described its body', async (t) => {
  const redirector = await server(t, (req, res) => {
    if (req.url === '/see-other') return res.writeHead(303, { location: '/result' }).end();
    if (req.url === '/moved') return res.writeHead(302, { location: '/result' }).end();
    res.end('result');
  });
  const guard = createEgressGuard({ allowHosts: ['127.0.0.1'] });
  for (const path of ['/see-other', '/moved']) {
    const res = await guard.request(`http://127.0.0.1:${redirector.port}${path}`, {
      method: 'POST',
      body: '{"a":1}',
      headers: { 'Content-Type': 'application/json', 'Content-Encoding': 'identity', 'X-Trace': 'kept' },
      timeoutMs: 5000,
    });
    t.is(res.body.toString(), 'result', path);
    const followed = redirector.seen.at(-1)!;
    t.is(followed.method, 'GET', path);
    t.is(followed.headers['content-type'], undefined, path);
    t.is(followed.headers['content-encoding'], undefined, path);
    t.is(followed.headers['content-length'], undefined, path);
    t.is(followed.headers['x-trace'], 'kept', path);
  }
});

test('an IPv6 answer with a zone id is refused, also one that embeds a private IPv4 address', async (t) => {
  for (const ip of ['::ffff:0:7f00:1%eth0', '::ffff:0:a9fe:a9fe%1', 'fe80::1%eth0', '2606:4700:4700::1111%1']) {
    t.truthy(blockedReason(ip), ip);
  }
  const guard = createEgressGuard({ resolver: fakeDns({ 'scoped.test': ['::ffff:0:7f00:1%eth0'] }) });
  const error = await t.throwsAsync(guard.check('http://scoped.test/'), { instanceOf: EgressRefusedError });
  t.regex(error!.reason, /resolves to/);
  const looked = await new Promise<unknown>((resolve) => (guard.lookup as unknown as (h: string, o: object, cb: (e: unknown) => void) => void)('scoped.test', { all: true }, resolve));
  t.true(looked instanceof EgressRefusedError);
});

test('only 301, 302, 303, 307 and 308 are followed; a Location that is not a URL is refused as a redirect, not thrown as a TypeError', async (t) => {
  const target = await server(t, (_req, res) => res.end('landed'));
  const redirector = await server(t, (req, res) => {
    const status = Number(req.url!.slice(1, 4));
    if (req.url === '/bad') return res.writeHead(302, { location: 'http://[::1' }).end();
    res.writeHead(status, { location: `http://127.0.0.1:${target.port}/landing` }).end(status === 304 ? undefined : `status ${status}`);
  });
  const guard = createEgressGuard({ allowHosts: ['127.0.0.1'] });
  for (const status of [300, 304, 305]) {
    const answer = await guard.request(`http://127.0.0.1:${redirector.port}/${status}`, { timeoutMs: 5000 });
    t.is(answer.status, status, 'answered as it is');
  }
  t.is(target.seen.length, 0, 'none of them was followed');
  const followed = await guard.request(`http://127.0.0.1:${redirector.port}/307`, { timeoutMs: 5000 });
  t.is(followed.body.toString(), 'landed');
  await t.throwsAsync(guard.request(`http://127.0.0.1:${redirector.port}/bad`, { timeoutMs: 5000 }), { instanceOf: EgressRefusedError, message: /not a URL/ });
});
