import test from 'ava';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createEdge } from '../../services/gateway/edge.js';
import { parseDeck } from '../../services/gateway/deck.js';
import { ManualClock } from '../../services/kit/clock.js';
import { serviceHttpObjects } from '../../services/kit/http/index.js';
import { createInProcessRevocations } from '../../services/kit/revocations.js';
import { silentLogger } from '../../plugins/core/index.js';
import { startFakeUpstream } from '../plugins/fakes.js';

// Kong overwrites X-Forwarded-Port (the port the client connected to), X-Forwarded-Path (the path
// it asked for) and X-Forwarded-Prefix (only when a route strips a prefix); the embedded edge does
// the same, so a client's values reach no service, whether the service is reached over HTTP or
// dispatched in process.
let upstream: Awaited<ReturnType<typeof startFakeUpstream>>;
let edge: Awaited<ReturnType<typeof createEdge>>;
let server: Server;
let port: number;
const LOCAL_ORIGIN = 'http://127.0.0.1:1';

test.before(async () => {
  upstream = await startFakeUpstream();
  const deck = parseDeck(
    `
_format_version: "3.0"
services:
  - name: remote
    url: ${upstream.url}
    routes:
      - { name: remote-kept, paths: ['~/remote(/|$)'], strip_path: false }
      - { name: remote-stripped, paths: ['/strip-remote'] }
  - name: local
    url: ${LOCAL_ORIGIN}
    routes:
      - { name: local-kept, paths: ['~/local(/|$)'], strip_path: false }
      - { name: local-stripped, paths: ['/strip-local'] }
`,
    {},
  );
  edge = await createEdge({
    deck,
    deps: { clock: new ManualClock(Date.UTC(2026, 11, 8, 0, 0, 1)), logger: silentLogger, revocations: createInProcessRevocations() },
    trustedProxies: [],
    // A service in this process that echoes the headers it was given.
    inProcess: (origin) =>
      origin === LOCAL_ORIGIN
        ? (req, res) => {
            res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ url: req.url, headers: req.headers }));
          }
        : undefined,
  });
  server = createServer(serviceHttpObjects, (req, res) => edge.handle(req, res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
});

test.after.always(async () => {
  server?.closeAllConnections();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  await edge?.close();
  await upstream?.close();
});

const SPOOF = { 'x-forwarded-port': '8443', 'x-forwarded-prefix': '/admin', 'x-forwarded-path': '/evil/path' };

const echo = async (path: string, headers: Record<string, string> = SPOOF) => {
  const res = await fetch(`http://127.0.0.1:${port}${path}`, { headers });
  const body = (await res.json()) as { url: string; headers: IncomingHttpHeaders };
  return { status: res.status, ...body };
};

for (const mode of ['remote', 'local'] as const) {
  const how = mode === 'remote' ? 'over HTTP' : 'in process';

  test(`${how}: a client's X-Forwarded-Port, -Path and -Prefix never reach the service; the edge's port and path do`, async (t) => {
    const answer = await echo(`/${mode}/a/b?x=1`);
    t.is(answer.status, 200);
    t.is(answer.url, `/${mode}/a/b?x=1`);
    t.is(answer.headers['x-forwarded-port'], String(port));
    t.is(answer.headers['x-forwarded-path'], `/${mode}/a/b`, 'the request path, without the query');
    t.is(answer.headers['x-forwarded-prefix'], undefined, 'no prefix stripped: none sent');
  });

  test(`${how}: a route that strips a prefix sends it as X-Forwarded-Prefix, never the client's`, async (t) => {
    const answer = await echo(`/strip-${mode}/c`);
    t.is(answer.status, 200);
    t.is(answer.url, '/c');
    t.is(answer.headers['x-forwarded-prefix'], `/strip-${mode}`);
    t.is(answer.headers['x-forwarded-path'], `/strip-${mode}/c`);
    t.is(answer.headers['x-forwarded-port'], String(port));
  });

  test(`${how}: without client values the edge still sets X-Forwarded-Port and -Path`, async (t) => {
    const answer = await echo(`/${mode}`, {});
    t.is(answer.headers['x-forwarded-port'], String(port));
    t.is(answer.headers['x-forwarded-path'], `/${mode}`);
    t.is(answer.headers['x-forwarded-prefix'], undefined);
  });
}
