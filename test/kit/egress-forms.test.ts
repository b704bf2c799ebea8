import http from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import { Agent, request } from 'undici';
import { blockedReason, createEgressGuard, destinationList, embeddedIpv4, EgressRefusedError, normalizeHost, type Resolver } from '../../services/kit/index.js';

/**
 * Every spelling of an address is judged as the address it is: IPv6 forms that embed an IPv4
 * address (mapped, translated, compatible, NAT64, 6to4) are checked as that IPv4 address, and
 * trailing-dot names are the names they qualify. The allow-list mode (`exclusive`) is the policy
 * behind PROVIDER_URL_ALLOW.
 */

const fakeDns = (table: Record<string, string[]>): Resolver => async (host) => {
  const answers = table[host];
  if (!answers) throw Object.assign(new Error('ENOTFOUND'), { code: 'ENOTFOUND' });
  return answers.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
};

test('IPv6 forms embedding a private IPv4 address are refused, in every spelling', (t) => {
  for (const ip of [
    '::ffff:0:7f00:1', // IPv4-translated 127.0.0.1 (the reported bypass)
    '::ffff:0:127.0.0.1',
    '0:0:0:0:ffff:0:a9fe:a9fe', // translated 169.254.169.254
    '0:0:0:0:0:ffff:7f00:0001',
    '::FFFF:7F00:1',
    '64:ff9b::127.0.0.1', // NAT64
    '64:ff9b::a00:1', // NAT64 10.0.0.1
    '2002:a9fe:a9fe::1', // 6to4 169.254.169.254
    '2002:c0a8:101::', // 6to4 192.168.1.1
    '::10.0.0.1', // IPv4-compatible
  ]) {
    t.truthy(blockedReason(ip), ip);
  }
  t.deepEqual(embeddedIpv4('::ffff:0:7f00:1'), { ipv4: '127.0.0.1', form: 'translated' });
  t.deepEqual(embeddedIpv4('2002:c0a8:101::'), { ipv4: '192.168.1.1', form: '6to4' });
  t.deepEqual(embeddedIpv4('64:ff9b::8.8.8.8'), { ipv4: '8.8.8.8', form: 'nat64' });
  t.is(embeddedIpv4('2606:4700:4700::1111'), null);
  // Mapped and translated spellings of a public address are that public address.
  t.is(blockedReason('::ffff:0:808:808'), null);
  t.is(blockedReason('::ffff:8.8.8.8'), null);
});

test('URLs with translated or NAT64 literals and resolvers answering them are refused', async (t) => {
  const guard = createEgressGuard({ resolver: fakeDns({ 'sneaky.test': ['::ffff:0:7f00:1'], 'nat.test': ['64:ff9b::a9fe:a9fe'] }) });
  for (const url of ['http://[::ffff:0:7f00:1]/', 'http://[::ffff:0:127.0.0.1]:8080/', 'http://[64:ff9b::7f00:1]/', 'http://[2002:7f00:1::]/', 'http://sneaky.test/', 'http://nat.test/']) {
    await t.throwsAsync(guard.check(url), { instanceOf: EgressRefusedError }, url);
  }
});

test('trailing-dot host names do not slip past the name list', async (t) => {
  const guard = createEgressGuard({ resolver: fakeDns({ 'localhost.': ['127.0.0.1'], localhost: ['127.0.0.1'], 'metadata.google.internal': ['169.254.169.254'] }) });
  for (const url of ['http://LOCALHOST./', 'http://localhost../', 'http://api.localhost./', 'http://metadata.google.internal./', 'http://Metadata.']) {
    const error = await t.throwsAsync(guard.check(url), { instanceOf: EgressRefusedError }, url);
    t.regex(error!.reason, /internal host name/, url);
  }
});

test('allow entries match every spelling: trailing dots, brackets, CIDRs, embedded IPv4', (t) => {
  const list = destinationList(['Models.Internal.', '10.1.0.0/16', '[fd00::1]', '127.0.0.1']);
  t.true(list.hasName('models.internal'));
  t.true(list.hasName('MODELS.INTERNAL.'));
  t.true(list.hasAddress('10.1.200.3'));
  t.false(list.hasAddress('10.2.0.1'));
  t.true(list.hasAddress('::ffff:10.1.0.9'));
  t.true(list.hasAddress('::ffff:0:7f00:1'));
  t.true(list.hasAddress('fd00::1'));
  t.throws(() => destinationList(['10.0.0.0/40']), { message: /CIDR/ });
});

test('exclusive mode: only listed destinations pass; loopback only when listed', async (t) => {
  const dns = fakeDns({ 'api.example.com': ['93.184.216.34'], 'vllm.cluster': ['10.1.2.3'], 'other.example.com': ['93.184.216.35'] });
  const open = createEgressGuard({ exclusive: true, resolver: dns });
  // An empty list: the ordinary rules (public yes, loopback and private no).
  t.is((await open.check('https://api.example.com/v1')).address, '93.184.216.34');
  await t.throwsAsync(open.check('http://127.0.0.1:8080/v1'), { instanceOf: EgressRefusedError });
  await t.throwsAsync(open.check('http://vllm.cluster/v1'), { instanceOf: EgressRefusedError });

  const listed = createEgressGuard({ exclusive: true, allowHosts: ['api.example.com', '10.1.0.0/16', '127.0.0.1'], resolver: dns });
  t.is((await listed.check('https://api.example.com/v1')).address, '93.184.216.34');
  t.is((await listed.check('http://vllm.cluster/v1')).address, '10.1.2.3');
  t.is((await listed.check('http://127.0.0.1:9/v1')).address, '127.0.0.1');
  t.is((await listed.check('http://[::ffff:127.0.0.1]:9/v1')).address, '::ffff:7f00:1');
  for (const url of ['https://other.example.com/v1', 'http://127.0.0.2/', 'http://[::1]/', 'http://localhost/']) {
    await t.throwsAsync(listed.check(url), { instanceOf: EgressRefusedError }, url);
  }
});

test('the guard lookup lets a pooled client (undici) connect only to allowed addresses', async (t) => {
  const server = http.createServer((_req, res) => res.end('ok'));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  t.teardown(() => new Promise<void>((r) => server.close(() => r())));
  const dns = fakeDns({ 'upstream.test': ['127.0.0.1'] });

  const refusing = createEgressGuard({ exclusive: true, resolver: dns });
  const agentA = new Agent({ connect: { lookup: refusing.lookup } });
  t.teardown(() => agentA.close());
  await t.throwsAsync(request(`http://upstream.test:${port}/`, { dispatcher: agentA }));

  const allowing = createEgressGuard({ exclusive: true, allowHosts: ['127.0.0.0/8'], resolver: dns });
  const agentB = new Agent({ connect: { lookup: allowing.lookup } });
  t.teardown(() => agentB.close());
  const res = await request(`http://upstream.test:${port}/`, { dispatcher: agentB });
  t.is(await res.body.text(), 'ok');
});

test('a host name with a long run of dots inside is normalised in one pass (trailing dots cut, inner ones kept)', (t) => {
  // 600 000 dots: the regex this replaced was tried from every dot, some minutes of one thread.
  const inner = 'a' + '.'.repeat(600_000) + 'b';
  t.is(normalizeHost(inner), inner);
  t.is(normalizeHost(`LOCALHOST${'.'.repeat(600_000)}`), 'localhost');
  t.is(normalizeHost('[::1]'), '::1');
  t.is(normalizeHost('...'), '');
});
