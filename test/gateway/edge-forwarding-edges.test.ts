import test from 'ava';
import { ManualClock } from '../../services/kit/clock.js';
import { startEdgeWithFakes } from './edge-harness.js';
import { rawExchange } from '../helpers/raw-http.js';

// Edge cases of what the edge forwards on a public route (no credential needed): Upgrade requests,
// a request without Host, and encoded paths that try to leave a public route's prefix.
let edge: Awaited<ReturnType<typeof startEdgeWithFakes>>;

test.before(async () => {
  edge = await startEdgeWithFakes({ clock: new ManualClock(Date.UTC(2026, 10, 22, 12, 0, 10)) });
});
test.after.always(async () => {
  await edge?.close();
});

/** Sends raw bytes to the edge and reads until it closes the connection. */
const raw = (request: string) => rawExchange(Number(new URL(edge.url).port), request);

const bodyOf = (answer: string) => JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as { url: string; headers: Record<string, string | undefined> };

test('a WebSocket upgrade is not switched: the upstream gets a plain request without Upgrade or Connection', async (t) => {
  const answer = await raw(
    'GET /.well-known/ws HTTP/1.1\r\nhost: edge\r\nconnection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n',
  ).catch(() => '');
  t.regex(answer, /^HTTP\/1\.1 200 /);
  const echo = JSON.parse(answer.slice(answer.indexOf('{'), answer.lastIndexOf('}') + 1)) as { headers: Record<string, string | undefined> };
  t.is(echo.headers.upgrade, undefined);
  t.false(/upgrade/i.test(echo.headers.connection ?? ''));
});

test('a request without Host does not forward a client-sent X-Forwarded-Host', async (t) => {
  const answer = await raw('GET /.well-known/h HTTP/1.0\r\nx-forwarded-host: attacker.example\r\n\r\n');
  t.regex(answer, /^HTTP\/1\.1 200 /);
  const echo = bodyOf(answer);
  t.not(echo.headers['x-forwarded-host'], 'attacker.example');
});

test('a client-sent Forwarded never reaches the service, and X-Real-IP is the address the edge derived', async (t) => {
  const res = await fetch(`${edge.url}/.well-known/f`, {
    headers: { forwarded: 'for=203.0.113.66;proto=https;host=admin.example', 'x-real-ip': '203.0.113.66', 'x-forwarded-for': '198.51.100.7' },
  });
  t.is(res.status, 200);
  const echo = (await res.json()) as { headers: Record<string, string | undefined> };
  t.is(echo.headers.forwarded, undefined);
  // The peer is not a trusted proxy: the client is the socket peer, whatever the client claims.
  t.is(echo.headers['x-real-ip'], '127.0.0.1');
  t.is(echo.headers['x-forwarded-for'], '198.51.100.7, 127.0.0.1');
});

test('a Forwarded header in any case or repeated is dropped; without a client X-Real-IP the edge still sets it', async (t) => {
  const answer = await raw('GET /.well-known/g HTTP/1.1\r\nhost: edge\r\nFORWARDED: for=10.0.0.1\r\nForwarded: for=10.0.0.2\r\nconnection: close\r\n\r\n');
  t.regex(answer, /^HTTP\/1\.1 200 /);
  const echo = JSON.parse(answer.slice(answer.indexOf('{'), answer.lastIndexOf('}') + 1)) as { headers: Record<string, string | undefined> };
  t.is(echo.headers.forwarded, undefined);
  t.is(echo.headers['x-real-ip'], '127.0.0.1');
});

test('behind a trusted proxy X-Real-IP is the client address taken from X-Forwarded-For, never a client-sent X-Real-IP', async (t) => {
  const behind = await startEdgeWithFakes({ clock: new ManualClock(Date.UTC(2026, 10, 22, 12, 0, 10)), trustedProxies: ['127.0.0.1'] });
  try {
    const res = await fetch(`${behind.url}/.well-known/p`, { headers: { 'x-forwarded-for': '198.51.100.23, 203.0.113.9', 'x-real-ip': '10.9.9.9', forwarded: 'for=10.9.9.9' } });
    t.is(res.status, 200);
    const echo = (await res.json()) as { headers: Record<string, string | undefined> };
    // The right-most entry that is not a trusted proxy, as for the per-address limits.
    t.is(echo.headers['x-real-ip'], '203.0.113.9');
    t.is(echo.headers.forwarded, undefined);
  } finally {
    await behind.close();
  }
});

for (const path of ['/.well-known/%2e%2e/v1/models', '/.well-known/..%2f..%2fv1/models', '//.well-known/../v1/models', '/.well-known/.%2E/v1/models']) {
  test(`${path} does not reach an authenticated route through a public one`, async (t) => {
    const res = await fetch(`${edge.url}${path}`);
    const body = (await res.json()) as { url?: string; error?: unknown };
    if (res.status === 200) t.false(/^\/v1\/models/.test(body.url ?? ''), `forwarded as ${body.url}`);
    else t.is(res.status, 401);
  });
}

test("a client's X-Forwarded-Port, -Path and -Prefix never reach the service: the edge's port and path do, and no prefix (no route strips one)", async (t) => {
  const res = await fetch(`${edge.url}/.well-known/q?x=1`, { headers: { 'x-forwarded-port': '8443', 'x-forwarded-path': '/evil', 'x-forwarded-prefix': '/admin' } });
  t.is(res.status, 200);
  const echo = (await res.json()) as { headers: Record<string, string | undefined> };
  t.is(echo.headers['x-forwarded-port'], new URL(edge.url).port);
  t.is(echo.headers['x-forwarded-path'], '/.well-known/q');
  t.is(echo.headers['x-forwarded-prefix'], undefined);
});
