import test from 'ava';
import { ManualClock } from '../../services/kit/clock.js';
import { rawExchange } from '../helpers/raw-http.js';
import { startEdgeWithFakes } from './edge-harness.js';

// A request body reaches the service framed, whatever the method and whatever the client's
// Connection header names: unframed, the service would read it as a next request on the kept-alive
// connection, one that never passed the edge's plugins. /auth/logout is a public route of every
// method, so no credential is needed to try.
let edge: Awaited<ReturnType<typeof startEdgeWithFakes>>;

test.before(async () => {
  edge = await startEdgeWithFakes({ clock: new ManualClock(Date.UTC(2026, 10, 22, 12, 0, 10)) });
});
test.after.always(async () => {
  await edge?.close();
});

const raw = (request: string) => rawExchange(Number(new URL(edge.url).port), request);
/** The fake service's echo of what it received (the answer is relayed chunked: the JSON between its braces). */
const echoOf = (answer: string) => JSON.parse(answer.slice(answer.indexOf('{'), answer.lastIndexOf('}') + 1)) as { method: string; url: string; body: string; headers: Record<string, string | undefined> };

// What an attacker would put in the body: a request the edge answers 404 to (internal-blocked).
const SMUGGLED = 'GET /internal/auth/validate-api-key HTTP/1.1\r\nhost: llm-api\r\nx-user-id: admin\r\n\r\n';
const chunked = `${SMUGGLED.length.toString(16)}\r\n${SMUGGLED}\r\n0\r\n\r\n`;

for (const [title, method, head, body] of [
  ['a chunked DELETE body', 'DELETE', 'transfer-encoding: chunked\r\nconnection: close\r\n', chunked],
  ['a chunked GET body', 'GET', 'transfer-encoding: chunked\r\nconnection: close\r\n', chunked],
  ['a chunked OPTIONS body', 'OPTIONS', 'transfer-encoding: chunked\r\nconnection: close\r\n', chunked],
  ['a DELETE whose Connection names Content-Length', 'DELETE', `content-length: ${SMUGGLED.length}\r\nconnection: close, content-length\r\n`, SMUGGLED],
] as const) {
  test.serial(`${title} reaches the service as that request's body, never as a request of its own`, async (t) => {
    const before = edge.upstream.seen.length;
    const answer = await raw(`${method} /auth/logout HTTP/1.1\r\nhost: edge\r\n${head}\r\n${body}`);
    t.regex(answer, /^HTTP\/1\.1 200 /);
    const echo = echoOf(answer);
    t.is(echo.method, method);
    t.is(echo.url, '/auth/logout');
    t.is(echo.body, SMUGGLED, 'the service read the whole body as the body');
    t.true(echo.headers['content-length'] === String(SMUGGLED.length) || echo.headers['transfer-encoding'] === 'chunked', JSON.stringify(echo.headers));
    t.deepEqual(
      edge.upstream.seen.slice(before).map((r) => r.url),
      ['/auth/logout'],
      'the service saw one request',
    );
  });
}
