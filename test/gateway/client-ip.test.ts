import test from 'ava';
import { createClientIp } from '../../services/gateway/client-ip.js';

// Some proxies append the client's port to the X-Forwarded-For entry they add. The address is the
// client's all the same: reading the entry as "not an address" would give every client the proxy's
// address, and one per-address limit for all of them.
const ip = createClientIp(['10.0.0.0/8']);

test('an X-Forwarded-For entry with a port: the address without it, IPv4 and bracketed IPv6', (t) => {
  t.is(ip('10.1.2.3', '203.0.113.7:4711'), '203.0.113.7');
  t.is(ip('10.1.2.3', '[2001:db8::1]:4711'), '2001:db8::1');
  t.is(ip('10.1.2.3', '[2001:db8::1]'), '2001:db8::1', 'brackets without a port');
  t.is(ip('10.1.2.3', '198.51.100.1:1, 203.0.113.7:4711, 10.9.9.9:80'), '203.0.113.7', 'a trusted hop with a port is still skipped');
  t.is(ip('10.1.2.3', '[::ffff:203.0.113.7]:4711'), '203.0.113.7', 'a mapped address in brackets is its IPv4 address');
});

test('an X-Forwarded-For entry that is not an address with a port still falls back to the peer', (t) => {
  t.is(ip('10.1.2.3', '2001:db8::1'), '2001:db8::1', 'a bare IPv6 address is not cut at its last colon');
  for (const entry of ['203.0.113.7:', '203.0.113.7:port', '203.0.113.7:123456', '[2001:db8::1', '[2001:db8::1]x', 'host:80', '[2001:db8::1]:']) {
    t.is(ip('10.1.2.3', entry), '10.1.2.3', entry);
  }
  t.is(ip('203.0.113.9', '198.51.100.1:80'), '203.0.113.9', 'an untrusted peer: the header is still ignored');
});
