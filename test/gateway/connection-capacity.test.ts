import { connect, type Socket } from 'node:net';
import test from 'ava';
import OpenAI from 'openai';
import { loadEdgeConfig } from '../../services/gateway/config.js';
import { randomBase62 } from '../../services/kit/secrets.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';
import { waitFor } from '../helpers/wait.js';

// The edge bounds the connections it holds at once (EDGE_MAX_CONNECTIONS), so that running out of
// open files never cuts a client without an answer: a request on a connection beyond the bound is
// answered 503 with Retry-After, in the error shape, and that connection closes.

function open(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => resolve(socket));
    socket.once('error', reject);
  });
}

/** Sends `request` on a new connection and resolves with everything the edge wrote before closing it. */
function exchange(port: number, request: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(request));
    let text = '';
    socket.on('data', (chunk) => (text += chunk.toString('utf8')));
    socket.once('close', () => resolve(text));
    socket.once('error', reject);
  });
}

const ADMIN_KEY = `sk_${randomBase62(32)}`;
let p: TestPlatform;
test.before(async () => {
  p = await startTestPlatform({ env: { EDGE_MAX_CONNECTIONS: '3', EDGE_MAX_CONNECTIONS_PER_ADDRESS: '100', BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY } });
});
test.after.always(async () => {
  await p?.stop();
});

test('EDGE_MAX_CONNECTIONS: a whole number, 0 (no bound) or auto (the default); anything else stops the edge naming it', (t) => {
  t.is(loadEdgeConfig({}).EDGE_MAX_CONNECTIONS, 'auto');
  t.is(loadEdgeConfig({ EDGE_MAX_CONNECTIONS: '0' }).EDGE_MAX_CONNECTIONS, 0);
  t.is(loadEdgeConfig({ EDGE_MAX_CONNECTIONS: ' 5000 ' }).EDGE_MAX_CONNECTIONS, 5000);
  for (const bad of ['-1', 'many', '1.5']) t.throws(() => loadEdgeConfig({ EDGE_MAX_CONNECTIONS: bad }), { message: /EDGE_MAX_CONNECTIONS/ });
});

test.serial('through the edge: with three connections open, a chat request on a fourth is answered 503 (Retry-After: 1, code server_busy) and its connection closes; once one closes, requests are served again', async (t) => {
  const port = Number(new URL(p.url).port);
  const held = [await open(port), await open(port), await open(port)];
  for (const socket of held) socket.on('error', () => {});
  const body = JSON.stringify({ model: 'any', messages: [{ role: 'user', content: 'hi' }] });
  const answer = await exchange(
    port,
    `POST /v1/chat/completions HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
  const [head, payload] = answer.split('\r\n\r\n');
  t.regex(head!, /^HTTP\/1\.1 503 /);
  t.regex(head!, /\r\nretry-after: 1(\r\n|$)/i);
  t.regex(head!, /\r\nconnection: close(\r\n|$)/i);
  t.like(JSON.parse(payload!), { error: { code: 'server_busy', param: null } });
  for (const socket of held) socket.destroy();
  // The edge counts a connection gone when its close event runs, after the client's: retried until then.
  const res = await waitFor(async () => {
    const r = await fetch(`${p.url}/healthz`, { headers: { connection: 'close' } }).catch(() => null);
    return r?.status === 200 ? r : null;
  }, 5000, 'served again');
  t.is(res.status, 200);
  const metrics = await (await fetch(`${p.metricsUrl}/metrics`, { headers: { connection: 'close' } })).text();
  t.regex(metrics, /^edge_connections_over_capacity_total(\{[^}]*\})? [1-9]/m);
  t.regex(metrics, /^edge_connections_max(\{[^}]*\})? 3$/m);
  // The scrape's own connection is on the metrics listener, which the public port's bound does not count.
  t.regex(metrics, /^edge_connections_open(\{[^}]*\})? \d+$/m);
});

test.serial('the openai SDK retries the 503 on its own, after the Retry-After it names, and succeeds once a connection is free', async (t) => {
  const port = Number(new URL(p.url).port);
  const held = [await open(port), await open(port), await open(port)];
  for (const socket of held) socket.on('error', () => {});
  const statuses: number[] = [];
  const client = new OpenAI({
    baseURL: `${p.url}/v1`,
    apiKey: ADMIN_KEY,
    maxRetries: 2,
    // The SDK's own fetch, watched: the first answer is the bound's 503; the held connections are
    // released then, so the SDK's retry finds room.
    fetch: async (url, init) => {
      const res = await fetch(url, init);
      statuses.push(res.status);
      if (res.status === 503) for (const socket of held) socket.destroy();
      return res;
    },
  });
  const models = await client.models.list();
  t.true(Array.isArray(models.data));
  t.deepEqual(statuses, [503, 200]);
});
