import http from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import { blockedReason, createEgressGuard, EgressRefusedError, setEgressResolver, type Resolver } from '../../services/kit/index.js';

const refused = async (t: import('ava').ExecutionContext, promise: Promise<unknown>, reason?: RegExp) => {
  const error = await t.throwsAsync(promise, { instanceOf: EgressRefusedError });
  if (reason) t.regex(error!.reason, reason);
};

// A resolver the test controls: names → addresses, as a DNS server would answer.
const fakeDns = (table: Record<string, string[]>): Resolver => async (host) => {
  const answers = table[host];
  if (!answers) throw Object.assign(new Error('ENOTFOUND'), { code: 'ENOTFOUND' });
  return answers.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
};

test('loopback, private, link-local, metadata and other special IPv4 addresses are blocked', (t) => {
  for (const ip of ['127.0.0.1', '127.255.0.9', '10.1.2.3', '172.16.0.1', '172.31.255.255', '192.168.1.1', '169.254.169.254', '169.254.1.1', '0.0.0.0', '100.64.0.1', '224.0.0.1', '255.255.255.255', '198.18.0.1']) {
    t.truthy(blockedReason(ip), ip);
  }
  for (const ip of ['8.8.8.8', '1.1.1.1', '172.32.0.1', '93.184.216.34']) t.is(blockedReason(ip), null, ip);
});

test('IPv6 loopback, unique-local, link-local, mapped and translated forms are blocked', (t) => {
  for (const ip of ['::1', '::', 'fe80::1', 'fc00::1', 'fd12:3456::1', 'ff02::1', '::ffff:127.0.0.1', '::ffff:7f00:1', '::ffff:169.254.169.254', '::ffff:a9fe:a9fe', '64:ff9b::a9fe:a9fe', '2002:7f00:1::', '::127.0.0.1']) {
    t.truthy(blockedReason(ip), ip);
  }
  for (const ip of ['2606:4700:4700::1111', '::ffff:8.8.8.8']) t.is(blockedReason(ip), null, ip);
});

test('the IPv6 documentation ranges (2001:db8::/32, 3fff::/20) and the SRv6 SID range (5f00::/16) are blocked; their neighbours are not', (t) => {
  for (const ip of ['2001:db8::1', '3fff::1', '3fff:0fff:ffff:ffff:ffff:ffff:ffff:ffff', '5f00::1', '5f00:ffff::1']) t.truthy(blockedReason(ip), ip);
  for (const ip of ['3fff:1000::1', '3ffe:ffff::1', '5f01::1', '5eff:ffff::1']) t.is(blockedReason(ip), null, ip);
});

test('literal and obfuscated IP URLs are refused before any connection', async (t) => {
  const guard = createEgressGuard({ resolver: fakeDns({}) });
  for (const url of [
    'http://127.0.0.1/',
    'http://2130706433/', // decimal 127.0.0.1
    'http://0x7f.0.0.1/', // hex octet
    'http://0177.0.0.1/', // octal octet
    'http://127.1/',
    'http://[::1]:8080/',
    'http://[::ffff:127.0.0.1]/',
    'http://169.254.169.254/latest/meta-data/',
    'http://[fd00::1]/',
  ]) {
    await refused(t, guard.check(url));
  }
});

test('metadata and internal host names, non-http schemes and credentials in URLs are refused', async (t) => {
  const guard = createEgressGuard({ resolver: fakeDns({ 'example.com': ['93.184.216.34'] }) });
  await refused(t, guard.check('http://metadata.google.internal/computeMetadata/v1/'), /internal host/);
  await refused(t, guard.check('http://localhost:8080/'), /internal host/);
  await refused(t, guard.check('http://api.localhost/'), /internal host/);
  await refused(t, guard.check('file:///etc/passwd'), /only http/);
  await refused(t, guard.check('gopher://example.com/'), /only http/);
  await refused(t, guard.check('http://user:pass@example.com/'), /credentials/);
  await refused(t, guard.check('not a url'), /valid URL/);
  const ok = await guard.check('https://example.com/a');
  t.is(ok.address, '93.184.216.34');
});

test('a DNS name resolving to a private address is refused, even when only one of its answers is private', async (t) => {
  const guard = createEgressGuard({
    resolver: fakeDns({ 'evil.test': ['10.0.0.5'], 'mixed.test': ['93.184.216.34', '127.0.0.1'], 'v6.test': ['::1'] }),
  });
  await refused(t, guard.check('http://evil.test/'), /resolves to/);
  await refused(t, guard.check('http://mixed.test/'), /resolves to/);
  await refused(t, guard.check('http://v6.test/'), /resolves to/);
  await refused(t, guard.check('http://nowhere.test/'), /does not resolve/);
});

// Local servers play "the internet": the guard allows 127.0.0.1 only through EGRESS_ALLOW_HOSTS,
// and an allowed name is connected to the very address the check approved.
async function server(handler: http.RequestListener): Promise<{ port: number; close(): Promise<void> }> {
  const s = http.createServer(handler);
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  return { port: (s.address() as AddressInfo).port, close: () => new Promise((r) => s.close(() => r())) };
}

test('redirects are followed only to destinations that pass the check again', async (t) => {
  const target = await server((_req, res) => res.end('secret internal data'));
  const redirector = await server((req, res) => {
    const to = req.url === '/to-private' ? `http://127.0.0.1:${target.port}/` : req.url === '/to-metadata' ? 'http://169.254.169.254/' : `http://public.test:${target.port}/final`;
    res.writeHead(302, { location: to }).end();
  });
  // "public.test" is an allowed name that resolves to loopback here; the redirector is reached by name too.
  const guard = createEgressGuard({
    allowHosts: ['public.test', 'redirector.test'],
    resolver: fakeDns({ 'public.test': ['127.0.0.1'], 'redirector.test': ['127.0.0.1'] }),
  });
  await refused(t, guard.request(`http://redirector.test:${redirector.port}/to-private`));
  await refused(t, guard.request(`http://redirector.test:${redirector.port}/to-metadata`));
  const followed = await guard.request(`http://redirector.test:${redirector.port}/fine`);
  t.is(followed.status, 200);
  t.is(followed.body.toString(), 'secret internal data');
  t.is(followed.url, `http://public.test:${target.port}/final`);
  const notFollowed = await guard.request(`http://redirector.test:${redirector.port}/fine`, { maxRedirects: 0 });
  t.is(notFollowed.status, 302);
  await target.close();
  await redirector.close();
});

test('the connection goes to the address that was checked (no second DNS answer is used)', async (t) => {
  const good = await server((_req, res) => res.end('checked address'));
  let calls = 0;
  // A rebinding resolver: first answer allowed, any later answer would be the metadata address.
  const rebinding: Resolver = async () => (calls++ === 0 ? [{ address: '127.0.0.1', family: 4 }] : [{ address: '169.254.169.254', family: 4 }]);
  const guard = createEgressGuard({ allowHosts: [], resolver: rebinding });
  // 127.0.0.1 is private, so even the first answer is refused without an allow-list entry…
  await refused(t, guard.request(`http://rebind.test:${good.port}/`));
  // …and with the name allowed, the request reaches exactly the address that was checked.
  calls = 0;
  const allowed = createEgressGuard({ allowHosts: ['rebind.test'], resolver: rebinding });
  const res = await allowed.request(`http://rebind.test:${good.port}/`);
  t.is(res.body.toString(), 'checked address');
  t.is(calls, 1, 'resolved once: the check and the connection used the same answer');
  await good.close();
});

test.serial('a guard built without a resolver resolves through the process resolver at each request, also one built before it was set', async (t) => {
  const guard = createEgressGuard();
  setEgressResolver(fakeDns({ 'internal.example.test': ['10.0.0.5'], 'metadata.example.test': ['169.254.169.254'], 'mapped.example.test': ['::ffff:127.0.0.1'] }));
  t.teardown(() => setEgressResolver(null));
  await refused(t, guard.check('http://internal.example.test/'), /resolves to a private/);
  await refused(t, guard.request('http://metadata.example.test/latest/meta-data/'), /resolves to a private/);
  await refused(t, guard.request('http://mapped.example.test/'), /resolves to a mapped form/);
  // The socket lookup the provider clients (undici) connect through asks the same resolver.
  const looked = await new Promise<unknown>((resolve) => (guard.lookup as unknown as (h: string, o: object, cb: (e: unknown) => void) => void)('internal.example.test', { all: true }, resolve));
  t.true(looked instanceof EgressRefusedError);
  // A guard with its own resolver keeps it.
  const own = createEgressGuard({ resolver: fakeDns({ 'internal.example.test': ['93.184.216.34'] }) });
  t.is((await own.check('http://internal.example.test/')).address, '93.184.216.34');
  setEgressResolver(null);
  await refused(t, guard.check('http://internal.example.test/'), /does not resolve/);
});

test('responses over maxBytes are cut off with an error', async (t) => {
  const big = await server((_req, res) => res.end(Buffer.alloc(64 * 1024, 1)));
  const guard = createEgressGuard({ allowHosts: ['127.0.0.1'] });
  await t.throwsAsync(guard.request(`http://127.0.0.1:${big.port}/`, { maxBytes: 1024 }), { message: /exceeds/ });
  await big.close();
});
