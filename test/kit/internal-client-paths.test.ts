import type { IncomingHttpHeaders } from 'node:http';
import test from 'ava';
import { servedOnLoopback } from '../helpers/loopback-server.js';
import { createInternalClient, type Principal } from '../../services/kit/index.js';

// The internal client sends a path to the other service's address and nowhere else: the gateway
// token and the caller's identity never reach a host a path names, and a path segment built from
// user input (a model id of `..`) is never resolved into another route.

const principal: Principal = { userId: 'user_abc', subject: 'user_abc', email: null, username: null, authMethod: 'jwt', isAdmin: false, isGuest: false };

interface Seen {
  url: string;
  headers: IncomingHttpHeaders;
}

async function recorder(t: import('ava').ExecutionContext) {
  const seen: Seen[] = [];
  const { origin } = await servedOnLoopback(t, (req, res) => {
    seen.push({ url: req.url!, headers: req.headers });
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
  });
  return { origin, seen };
}

test('a path that reads as another host (`//host/…`, `/\\host/…`) still goes to the internal address, so no other host receives the gateway token or identity', async (t) => {
  const internal = await recorder(t);
  const outsider = await recorder(t);
  const client = createInternalClient({ baseUrl: internal.origin, gatewayToken: 'gw-secret', timeoutMs: 5000 });
  t.teardown(() => client.close());
  const outsiderHost = new URL(outsider.origin).host;
  for (const path of [`//${outsiderHost}/steal`, `/\\${outsiderHost}/steal`]) {
    const res = await client.call('GET', path, { principal });
    t.is(res.status, 200, path);
  }
  t.is(outsider.seen.length, 0, 'the other host received nothing');
  t.deepEqual(
    internal.seen.map((s) => s.url),
    [`//${outsiderHost}/steal`, `/\\${outsiderHost}/steal`],
  );
  for (const s of internal.seen) {
    t.is(s.headers['x-gateway-token'], 'gw-secret');
    t.is(s.headers['x-user-id'], 'user_abc');
  }
});

test('dot segments in a path are sent as they are, never resolved into another route of the service', async (t) => {
  const internal = await recorder(t);
  const client = createInternalClient({ baseUrl: () => `${internal.origin}/`, gatewayToken: 'gw-secret', timeoutMs: 5000 });
  t.teardown(() => client.close());
  // What a caller builds from a user's model id: each segment encoded, which leaves dots alone.
  for (const model of ['../../internal/validate', '..']) {
    const path = `/v1/models/${model.split('/').map(encodeURIComponent).join('/')}`;
    await client.call('GET', path, { principal });
  }
  // Percent-encoded dots are dot segments to a URL parser too.
  await client.call('GET', '/v1/models/%2E%2e/admin', { principal });
  t.deepEqual(
    internal.seen.map((s) => s.url),
    ['/v1/models/../../internal/validate', '/v1/models/..', '/v1/models/%2E%2e/admin'],
  );
  // An ordinary path with a query is sent unchanged; what a request line cannot carry is encoded as a URL would.
  await client.call('GET', '/v1/conversations/conv_1/items?limit=100&order=desc', { principal });
  t.is(internal.seen.at(-1)!.url, '/v1/conversations/conv_1/items?limit=100&order=desc');
  await client.call('GET', '/v1/files/a b/é?q=x y', { principal });
  t.is(internal.seen.at(-1)!.url, '/v1/files/a%20b/%C3%A9?q=x%20y');
  // A lone surrogate (which encodeURIComponent refuses) goes as U+FFFD, as a URL writes it.
  await client.call('GET', '/v1/files/x\ud800y', { principal });
  t.is(internal.seen.at(-1)!.url, '/v1/files/x%EF%BF%BDy');
});
