import http from 'node:http';
import net from 'node:net';
import test, { type ExecutionContext } from 'ava';
import { afterFirstChunk, drainStarted, readyzHalfSent, secondSignalExits } from '../helpers/drain.js';
import { startEdgeProcess } from '../helpers/process.js';
import { reliabilityFigures } from '../helpers/reliability-figures.js';

// The edge started on its own (services/gateway/main.ts, as `npm run cluster` and a deployment
// start it) gets SIGTERM while it streams an answer. From the moment the drain starts its /readyz
// answers 503 (asked on a connection opened before the signal, since new connections are
// refused); the stream runs to its end within the drain timeout and the process exits 0. A stream
// still running when the drain timeout passes is cut and the process still exits 0; a second
// signal during a long drain exits at once (1).
const figures = reliabilityFigures('edge-sigterm');
const row = figures.row('SIGTERM during streaming (edge process)');
test.after.always(() => figures.write());

/**
 * The upstream of every deck service: `/openapi.json` (a public route, so no credential is
 * needed) answers as an event stream that sends its first event at once and the rest only when
 * the test calls `finish()`.
 */
async function heldStreams(t: ExecutionContext) {
  const open: http.ServerResponse[] = [];
  const waiting: Array<() => void> = [];
  const server = http.createServer((req, res) => {
    if (req.url !== '/openapi.json') return void res.writeHead(404).end();
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    res.write('data: first\n\n');
    open.push(res);
    waiting.splice(0).forEach((w) => w());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  return {
    url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    finish() {
      for (const res of open.splice(0)) res.end('data: [DONE]\n\n');
    },
  };
}

/** Opens the held stream through the edge; resolves once its first event arrived. `rest` is the whole body. */
async function openStream(url: string): Promise<{ rest: Promise<string> }> {
  const res = await fetch(`${url}/openapi.json`);
  if (res.status !== 200) throw new Error(`stream refused: ${res.status} ${await res.text()}`);
  return afterFirstChunk(res);
}

test('edge process: SIGTERM mid-stream, /readyz 503 from the start of the drain, new connections refused, the stream finishes, exit 0', async (t) => {
  const upstream = await heldStreams(t);
  const edge = await startEdgeProcess(t, upstream.url, { SHUTDOWN_TIMEOUT_MS: '30000' });
  const ready = await fetch(`${edge.url}/readyz`);
  t.is(ready.status, 200);
  t.deepEqual(await ready.json(), { status: 'ready', service: 'gateway' });

  const stream = await openStream(edge.url);
  const probe = await readyzHalfSent(edge.port);
  edge.child.process.kill('SIGTERM');
  row.faultsInjected++;
  await drainStarted(edge.child);
  const readiness = await probe.finish();
  t.is(readiness.status, 503);
  t.is(readiness.body?.status, 'not_ready');
  t.is(readiness.body?.checks?.shutdown, 'unavailable');
  // New connections are refused while draining: a load balancer's next probe or request goes elsewhere.
  await t.throwsAsync(fetch(`${edge.url}/healthz`));

  upstream.finish();
  const text = await stream.rest;
  t.true(text.endsWith('data: [DONE]\n\n'), text.slice(-200));
  const exit = await edge.child.exited;
  t.is(exit.code, 0, edge.child.stdout().slice(-2000));
  row.requestsChecked += 4;
  row.faultsSurvived++;
});

test('edge process: a stream still running when the drain timeout passes is cut, and the process exits 0', async (t) => {
  const upstream = await heldStreams(t);
  const edge = await startEdgeProcess(t, upstream.url, { SHUTDOWN_TIMEOUT_MS: '1000' });
  // The upstream never finishes this stream: only the drain timeout ends it.
  const stream = await openStream(edge.url);
  edge.child.process.kill('SIGTERM');
  row.faultsInjected++;
  const exit = await edge.child.exited;
  t.is(exit.code, 0, edge.child.stdout().slice(-2000));
  const text = await stream.rest.catch(() => 'cut');
  t.false(text.endsWith('data: [DONE]\n\n'), 'the stream did not complete: it was cut at the drain timeout');
  row.requestsChecked += 1;
  row.faultsSurvived++;
});

test('edge process: a second signal during a long drain exits at once', async (t) => {
  const upstream = await heldStreams(t);
  const edge = await startEdgeProcess(t, upstream.url, { SHUTDOWN_TIMEOUT_MS: '600000' });
  // The drain would wait the whole timeout for this stream.
  const stream = await openStream(edge.url);
  row.faultsInjected++;
  await secondSignalExits(t, edge.child, stream);
  row.requestsChecked += 1;
  row.faultsSurvived++;
});
