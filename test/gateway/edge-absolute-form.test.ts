import test from 'ava';
import { ManualClock } from '../../services/kit/clock.js';
import { rawExchange } from '../helpers/raw-http.js';
import { startEdgeWithFakes } from './edge-harness.js';

// A request target in absolute form (`GET http://host/path HTTP/1.1`), as clients configured for a
// forward proxy send it. Kong routes it by its path; so does the embedded edge, through the same
// router, plugins and /internal block as the origin form.
let edge: Awaited<ReturnType<typeof startEdgeWithFakes>>;

test.before(async () => {
  edge = await startEdgeWithFakes({ clock: new ManualClock(Date.UTC(2026, 10, 22, 12, 0, 10)) });
});
test.after.always(async () => {
  await edge?.close();
});

const raw = (target: string, headers = 'host: other.example\r\n') => rawExchange(Number(new URL(edge.url).port), `GET ${target} HTTP/1.1\r\n${headers}connection: close\r\n\r\n`);
const statusOf = (answer: string) => Number(/^HTTP\/1\.1 (\d{3}) /.exec(answer)?.[1]);
const bodyOf = (answer: string) => JSON.parse(answer.slice(answer.indexOf('{'), answer.lastIndexOf('}') + 1)) as { url: string; headers: Record<string, string | undefined>; error?: { code: string } };

test('an absolute-form target is routed by its path; its authority is the Host the edge forwards', async (t) => {
  const answer = await raw('http://api.example/.well-known/abs?x=1');
  t.is(statusOf(answer), 200, answer.slice(0, 200));
  const echo = bodyOf(answer);
  t.is(echo.url, '/.well-known/abs?x=1', 'the upstream gets the origin form');
  t.is(echo.headers['x-forwarded-host'], 'api.example', 'the authority replaces the Host header (RFC 9112), one host for every reader');
  t.is(statusOf(await raw('HTTPS://api.example/.well-known/abs')), 200, 'scheme in any case');
  // Targets that are not absolute http(s) URLs match no route.
  for (const target of ['ftp://api.example/.well-known/abs', 'http://user@api.example/.well-known/abs', 'http:///.well-known/abs']) {
    t.is(statusOf(await raw(target)), 404, target);
  }
});

test('an absolute-form target passes the same plugins and /internal block as the origin form', async (t) => {
  const internal = await raw('http://api.example/internal/auth/validate-api-key');
  t.is(statusOf(internal), 404);
  t.is(bodyOf(internal).error?.code, 'not_found');
  const before = edge.upstream.seen.length;
  const unauthenticated = await raw('http://api.example/v1/models');
  t.is(statusOf(unauthenticated), 401, 'no credential: refused by the auth plugins, as /v1/models is');
  t.is(edge.upstream.seen.length, before);
});
