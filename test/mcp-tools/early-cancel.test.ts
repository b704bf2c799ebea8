import http from 'node:http';
import test from 'ava';
import { Registry } from 'prom-client';
import { createLogger } from '../../services/kit/index.js';
import { createToolCaller, EARLY_CANCELS_PER_USER } from '../../services/mcp-tools/tools/call-tool.js';
import { createCatalog } from '../../services/mcp-tools/tools/catalog.js';
import { createToolMetrics } from '../../services/mcp-tools/tools/metrics.js';
import { mcpToolsService } from '../../services/mcp-tools/service.js';
import { startTestService } from '../helpers/env.js';
import { createTestUser, edgeHeaders } from '../helpers/users.js';
import { untilCancelledTool } from '../mcp/until-cancelled-tool.js';

// A client's cancel travels in a request of its own, so it can reach mcp-tools before the call it
// names has started (the call's POST still being read: a large document, a slow link). It found no
// call, and the call then ran to its end anyway: a python_exec sandbox for up to 60 s, holding the
// user's slot, for a call its client had given up. A cancel that arrives while one of the user's
// POSTs is still open is now kept for the calls of those POSTs. Each step is ordered by hand: the
// POSTs' arrivals (`admit`), the cancel, the call starting, the POSTs answered (`release`).
const signal = new AbortController().signal;

function caller() {
  let started = 0;
  const callTool = createToolCaller({
    catalog: createCatalog([untilCancelledTool(() => started++)]),
    switches: { isEnabled: () => true },
    metrics: createToolMetrics(new Registry()),
    logger: createLogger({ level: 'silent', name: 'early-cancel-test' }),
    maxConcurrentCalls: 8,
  });
  return { callTool, started: () => started };
}

test('a cancel that overtakes its call is kept for it: the call is answered cancelled and starts nothing', async (t) => {
  const { callTool, started } = caller();
  const callPost = callTool.admit('usr_a'); // the call's POST arrives; its body is still being read
  const cancelPost = callTool.admit('usr_a');
  t.false(callTool.cancel('usr_a', 7, 'user pressed stop'), 'no call under that id runs yet');
  callTool.release('usr_a', cancelPost);
  const result = await callTool({ userId: 'usr_a', requestId: 7, signal, admission: callPost }, 'wait', {});
  t.true(result.isError);
  t.is((result.content[0] as { text: string }).text, 'The call was cancelled');
  t.is(started(), 0, 'the tool never ran');
  callTool.release('usr_a', callPost);
});

test("a cancel is kept only for POSTs that arrived before it, of the same user, and not past the POSTs' answers", async (t) => {
  const { callTool, started } = caller();
  // A stale cancel (its call long over) while another POST of the user is open: a call of a POST that
  // arrives later under the same id runs.
  const open = callTool.admit('usr_b');
  const cancelPost = callTool.admit('usr_b');
  callTool.cancel('usr_b', 1);
  callTool.release('usr_b', cancelPost);
  const later = callTool.admit('usr_b');
  const running = callTool({ userId: 'usr_b', requestId: 1, signal, admission: later }, 'wait', {});
  t.is(started(), 1, 'the later call runs');
  t.true(callTool.cancel('usr_b', 1));
  await running;
  callTool.release('usr_b', later);

  // Another user's cancel under the same id stops nothing of this user's.
  const other = callTool.admit('usr_c');
  callTool.cancel('usr_c', 2);
  const mine = callTool({ userId: 'usr_b', requestId: 2, signal, admission: open }, 'wait', {});
  t.is(started(), 2);
  t.true(callTool.cancel('usr_b', 2));
  await mine;
  callTool.release('usr_c', other);

  // Once every POST open at the cancel is answered, nothing is kept: a call reusing the id runs.
  callTool.cancel('usr_b', 3);
  callTool.release('usr_b', open);
  const next = callTool.admit('usr_b');
  const reused = callTool({ userId: 'usr_b', requestId: 3, signal, admission: next }, 'wait', {});
  t.is(started(), 3);
  t.true(callTool.cancel('usr_b', 3));
  await reused;
  callTool.release('usr_b', next);
});

test('at most EARLY_CANCELS_PER_USER cancels are kept per user: the oldest is dropped', async (t) => {
  const { callTool, started } = caller();
  const callPost = callTool.admit('usr_d');
  for (let id = 0; id <= EARLY_CANCELS_PER_USER; id++) callTool.cancel('usr_d', id);
  const newest = await callTool({ userId: 'usr_d', requestId: EARLY_CANCELS_PER_USER, signal, admission: callPost }, 'wait', {});
  t.true(newest.isError);
  t.is(started(), 0);
  const oldest = callTool({ userId: 'usr_d', requestId: 0, signal, admission: callPost }, 'wait', {});
  t.is(started(), 1, 'the oldest cancel was dropped: its call runs');
  t.true(callTool.cancel('usr_d', 0));
  await oldest;
  callTool.release('usr_d', callPost);
});

test('through the service: a cancel sent while the call POST is still being read stops the call before its sandbox starts', async (t) => {
  const svc = await startTestService(mcpToolsService);
  t.teardown(() => svc.close());
  const user = await createTestUser(svc.runtime.db.knex);
  const headers = { ...edgeHeaders(svc.gatewaySecret, user, 'apikey'), 'content-type': 'application/json', accept: 'application/json' };
  const post = async (body: unknown) => {
    const res = await fetch(`${svc.url}/v1/mcp`, { method: 'POST', headers, body: JSON.stringify(body) });
    return { status: res.status, text: await res.text() };
  };
  // The ping is what orders the steps below, not a warm-up for speed. Node answers "100 Continue"
  // as it hands the request to the app, and the handler counts the POST in (`admit`) only once the
  // kit has resolved the caller's identity. On a cold user-directory cache that is a database
  // lookup, which can end after the client has seen "100 Continue" and sent its cancel: the cancel
  // would find no open POST, be dropped, and the call would run (an answer after its timeout, not
  // "cancelled"). The ping fills the cache (for IDENTITY_CACHE_TTL_MS, 5 s by default: far longer
  // than the steps below take), so the identity resolves synchronously and `admit` runs in the same
  // tick as the request is handed over: before the client can act on "100 Continue".
  t.is((await post({ jsonrpc: '2.0', id: 'warm', method: 'ping' })).status, 200);
  const body = Buffer.from(JSON.stringify({ jsonrpc: '2.0', id: 'slow-1', method: 'tools/call', params: { name: 'python_exec', arguments: { code: 'import time\ntime.sleep(60)', timeout_ms: 5000 } } }));
  // The service answers "100 Continue" once it has taken the request: the POST has arrived, its body not sent yet.
  const request = http.request(`${svc.url}/v1/mcp`, { method: 'POST', headers: { ...headers, 'content-length': String(body.length), expect: '100-continue' } });
  const answer = new Promise<{ status: number; json: any }>((resolve, reject) => {
    request.on('response', (res) => {
      let text = '';
      res.on('data', (chunk) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode!, json: JSON.parse(text) }));
    });
    request.on('error', reject);
  });
  await new Promise<void>((resolve) => request.once('continue', resolve));
  request.write(body.subarray(0, 10));
  t.is((await post({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'slow-1', reason: 'stop' } })).status, 202);
  request.end(body.subarray(10));
  const { status, json } = await answer;
  t.is(status, 200);
  t.is(json.id, 'slow-1');
  t.true(json.result.isError, JSON.stringify(json));
  t.is(json.result.content[0].text, 'The call was cancelled');
});
