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

for (const path of ['/.well-known/%2e%2e/v1/models', '/.well-known/..%2f..%2fv1/models', '//.well-known/../v1/models', '/.well-known/.%2E/v1/models']) {
  test(`${path} does not reach an authenticated route through a public one`, async (t) => {
    const res = await fetch(`${edge.url}${path}`);
    const body = (await res.json()) as { url?: string; error?: unknown };
    if (res.status === 200) t.false(/^\/v1\/models/.test(body.url ?? ''), `forwarded as ${body.url}`);
    else t.is(res.status, 401);
  });
}
