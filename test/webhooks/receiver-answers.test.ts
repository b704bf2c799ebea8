import http from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import { startStack, waitFor, type Stack } from './helpers.js';

// What a receiver answers beyond its status line never changes the verdict: a body that is not
// text (a gzip body, NUL bytes), one that never ends, one of megabytes, one still trickling when
// WEBHOOK_TIMEOUT_MS is up. The attempt is recorded once, on its status, with a text excerpt.
const stacks: Stack[] = [];
let receiver: { port: number; hits: Map<string, number>; closed: Map<string, Promise<void>>; close(): Promise<void> };

const GZIP_HEAD = Buffer.from([0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xc3, 0x28]);

test.before(async () => {
  const hits = new Map<string, number>();
  const closed = new Map<string, Promise<void>>();
  const server = http.createServer((req, res) => {
    const path = req.url ?? '';
    hits.set(path, (hits.get(path) ?? 0) + 1);
    closed.set(path, new Promise<void>((resolve) => res.on('close', resolve)));
    req.resume();
    req.on('end', () => {
      if (path.startsWith('/gzip')) return res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-encoding': 'gzip' }).end(GZIP_HEAD);
      if (path.startsWith('/status-')) return res.writeHead(Number(path.slice('/status-'.length)), { 'content-type': 'text/plain' }).end('odd');
      // A final 101 (Switching Protocols) the request never asked for, the connection left open.
      if (path === '/switch') return void req.socket.write('HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n');
      if (path === '/gone-big') return res.writeHead(410, { 'content-type': 'text/plain' }).end(Buffer.alloc(2 * 1024 * 1024, 0x62));
      if (path === '/trickle') {
        // The status line and a first piece at once, then nothing more: the body never ends.
        res.writeHead(200, { 'content-type': 'text/plain' });
        return res.write('partial');
      }
      // '/endless': a 2xx whose body never ends.
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      const chunk = Buffer.alloc(64 * 1024, 0x61);
      const pump = () => {
        while (!res.destroyed && res.write(chunk));
      };
      res.on('drain', pump);
      pump();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  receiver = {
    port: (server.address() as AddressInfo).port,
    hits,
    closed,
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
});
test.after.always(async () => {
  for (const stack of stacks) await stack.close();
  await receiver?.close();
});

async function stackOn(bus: 'pg' | 'amqp'): Promise<Stack> {
  // A retry 50 ms later would show at once as a second attempt.
  const stack = await startStack({ bus, env: { WEBHOOK_TIMEOUT_MS: '1500', WEBHOOK_RETRY_SCHEDULE: '50ms,50ms' } });
  stacks.push(stack);
  return stack;
}

/** Sends the test event to a new subscription of `path` and waits until its delivery is no longer pending. */
async function deliverTo(stack: Stack, path: string) {
  const hook = await stack.api('POST', '/v1/admin/webhooks', { url: `http://127.0.0.1:${receiver.port}${path}`, events: ['model.added'] });
  const sent = await stack.api('POST', `/v1/admin/webhooks/${hook.body.id}/test`);
  const delivery = await waitFor(async () => {
    const d = (await stack.api('GET', `/v1/admin/webhooks/${hook.body.id}/deliveries/${sent.body.id}`)).body;
    return d.status !== 'pending' ? d : undefined;
  }, 20_000, `the delivery to ${path} to be recorded`);
  const excerpts = await stack.svc.runtime.db.knex('webhook_delivery_attempts').where({ delivery_id: sent.body.id }).orderBy('attempt').pluck('response_excerpt');
  return { delivery, excerpts: excerpts as (string | null)[] };
}

for (const bus of ['pg', 'amqp'] as const) {
  test.serial(`${bus}: a 2xx whose body is gzip bytes with NUL in them is recorded as delivered, with a text excerpt`, async (t) => {
    const stack = await stackOn(bus);
    const path = `/gzip-${bus}`;
    const { delivery, excerpts } = await deliverTo(stack, path);
    t.is(delivery.status, 'delivered');
    t.is(delivery.attempt_count, 1);
    t.is(delivery.last_status_code, 200);
    t.is(excerpts.length, 1);
    t.false(excerpts[0]!.includes('\u0000'));
    t.true(excerpts[0]!.includes('\ufffd'), 'bytes that are not UTF-8 are replaced, not dropped silently');
    t.is(receiver.hits.get(path), 1);
  });
}

test.serial('a 2xx whose body never ends is delivered on its status line; only the excerpt is read and the connection closed', async (t) => {
  const stack = stacks[0] ?? (await stackOn('pg'));
  const { delivery, excerpts } = await deliverTo(stack, '/endless');
  t.is(delivery.status, 'delivered');
  t.is(delivery.attempt_count, 1);
  t.is(excerpts[0], 'a'.repeat(512));
  t.is(receiver.hits.get('/endless'), 1);
  t.true(await receiver.closed.get('/endless')?.then(() => true), 'the worker hung up on the rest');
});

test.serial('a 4xx with a 2 MiB body fails once without a retry (a size is no network error)', async (t) => {
  const stack = stacks[0] ?? (await stackOn('pg'));
  const { delivery, excerpts } = await deliverTo(stack, '/gone-big');
  t.is(delivery.status, 'failed');
  t.is(delivery.attempt_count, 1);
  t.is(delivery.last_status_code, 410);
  t.is(delivery.attempts[0].outcome, 'failed');
  t.is(Buffer.byteLength(excerpts[0]!), 512);
  t.is(receiver.hits.get('/gone-big'), 1);
});

test.serial('a 2xx whose body is still trickling when WEBHOOK_TIMEOUT_MS is up counts as delivered', async (t) => {
  const stack = stacks[0] ?? (await stackOn('pg'));
  const { delivery, excerpts } = await deliverTo(stack, '/trickle');
  t.is(delivery.status, 'delivered');
  t.is(delivery.attempt_count, 1);
  t.is(delivery.last_status_code, 200);
  t.is(excerpts[0], 'partial');
  t.is(receiver.hits.get('/trickle'), 1);
});

test.serial('a status beyond 5xx (600 to 999, which HTTP does not define) fails once without a retry: only 5xx is retried', async (t) => {
  const stack = stacks[0] ?? (await stackOn('pg'));
  for (const status of [600, 999]) {
    const { delivery } = await deliverTo(stack, `/status-${status}`);
    t.is(delivery.status, 'failed', String(status));
    t.is(delivery.attempt_count, 1, String(status));
    t.is(delivery.last_status_code, status);
    t.is(delivery.attempts[0].outcome, 'failed');
    t.is(receiver.hits.get(`/status-${status}`), 1);
  }
});

test.serial('a 101 Switching Protocols answer fails once without a retry (it used to leave the attempt waiting for ever)', async (t) => {
  const stack = stacks[0] ?? (await stackOn('pg'));
  const { delivery, excerpts } = await deliverTo(stack, '/switch');
  t.is(delivery.status, 'failed');
  t.is(delivery.attempt_count, 1);
  t.is(delivery.last_status_code, 101);
  t.is(delivery.attempts[0].outcome, 'failed');
  t.is(excerpts[0], null);
  t.is(receiver.hits.get('/switch'), 1);
});
