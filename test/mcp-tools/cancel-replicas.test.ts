import http from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import amqp, { type ChannelModel } from 'amqplib';
import { openRuntime, serviceUrls, startService, type Bus, type Runtime, type StartedService } from '../../services/kit/index.js';
import { mcpToolsService } from '../../services/mcp-tools/service.js';
import { queueConsumers, queuesStartingWith } from '../helpers/amqp.js';
import { startTestService, TEST_AMQP_URL, type TestService } from '../helpers/env.js';
import { startFaultProxyFor, type UrlFaultProxy } from '../helpers/fault-proxy.js';
import { createTestUser, edgeHeaders, type TestUser } from '../helpers/users.js';
import { waitFor } from '../helpers/wait.js';

// Two mcp-tools replicas on one bus (real RabbitMQ, this file's own exchange and queue prefix) and
// one database, as behind the gateway: the server keeps no session, so a client's
// notifications/cancelled may reach the replica that is not running the call it names. It must
// still stop that call, and only a call of the same user. Each replica reaches RabbitMQ through a
// fault proxy of its own, so a test can cut one replica off the broker while the other stays. The
// last test stops both replicas: each deletes its queue of cancels as it stops.
let a: TestService;
let proxyA: UrlFaultProxy;
let proxyB: UrlFaultProxy;
let runtimeB: Runtime | undefined;
let b: StartedService | undefined;
let bUrl: string;
let page: Awaited<ReturnType<typeof startEndlessPages>>;

/** Pages that never finish: headers, then a byte now and then until their reader goes away. */
async function startEndlessPages() {
  let requests = 0;
  let open = 0;
  const server = http.createServer((_req, res) => {
    requests++;
    open++;
    res.writeHead(200, { 'content-type': 'text/plain' });
    const timer = setInterval(() => res.write('x'), 200);
    res.on('close', () => {
      clearInterval(timer);
      open--;
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: (path: string) => `http://127.0.0.1:${(server.address() as AddressInfo).port}${path}`,
    requests: () => requests,
    open: () => open,
    close: () => {
      server.closeAllConnections();
      server.close();
    },
  };
}

test.before(async () => {
  page = await startEndlessPages();
  proxyA = await startFaultProxyFor(TEST_AMQP_URL, 5672);
  proxyB = await startFaultProxyFor(TEST_AMQP_URL, 5672);
  // SCRAPE_TIMEOUT_MS far past the test's own bounds: only a cancel ends a call here.
  a = await startTestService(mcpToolsService, { bus: 'amqp', env: { AMQP_URL: proxyA.proxiedUrl, EGRESS_ALLOW_HOSTS: '127.0.0.1', SCRAPE_TIMEOUT_MS: '120000' } });
  // Replica B: its own process state and its own connections, the same configuration (database schema, exchange, queue prefix).
  runtimeB = await openRuntime({ ...a.runtime.config, AMQP_URL: proxyB.proxiedUrl }, { name: 'replica-b', migrations: [] });
  b = await startService(mcpToolsService, { runtime: runtimeB, gatewaySecret: a.gatewaySecret, urls: serviceUrls(runtimeB.config) });
  bUrl = `http://127.0.0.1:${b.server.port}`;
});
test.after.always(async () => {
  await b?.server.close(1000);
  await b?.stop();
  await runtimeB?.close();
  await a?.close();
  page?.close();
  await proxyA?.close();
  await proxyB?.close();
});

async function rpc(url: string, user: TestUser, body: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(`${url}/v1/mcp`, {
    method: 'POST',
    headers: { ...edgeHeaders(a.gatewaySecret, user), 'content-type': 'application/json', accept: 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : null };
}

function slowCall(user: TestUser, id: number, path: string) {
  const state: { settled: boolean; result?: any } = { settled: false };
  const done = rpc(a.url, user, { jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'scrape', arguments: { url: page.url(path) } } }).then((answer) => {
    state.settled = true;
    state.result = answer.json?.result;
    return answer;
  });
  // A call still running when the file stops fails with the servers: that is no unhandled rejection.
  done.catch(() => {});
  return { state, done };
}

test.serial("a cancel sent to the other replica stops the call, and only the same user's call under that id", async (t) => {
  const x = await createTestUser(a.runtime.db.knex);
  const y = await createTestUser(a.runtime.db.knex);
  // Both users have a call with JSON-RPC id 7 running on replica A.
  const before = page.requests();
  const xCall = slowCall(x, 7, '/x');
  const yCall = slowCall(y, 7, '/y');
  await waitFor(() => page.requests() >= before + 2, 10_000, 'both calls fetching their page');

  // Y cancels its id 7 through replica B, which runs nothing.
  const cancelY = await rpc(bUrl, y, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 7, reason: 'changed my mind' } });
  t.is(cancelY.status, 202);
  await waitFor(() => yCall.state.settled, 10_000, "Y's call ended by the cancel that reached replica B");
  t.true(yCall.state.result?.isError, JSON.stringify(yCall.state.result));
  t.is(yCall.state.result?.content?.[0]?.text, 'The call was cancelled');
  t.false(xCall.state.settled, "X's call under the same id goes on: Y's cancel named Y's call only");

  // A cancel of an id X has no call under cancels nothing either; then X's own cancel, through B, stops X's call.
  t.is((await rpc(bUrl, x, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: '7' } })).status, 202);
  t.is((await rpc(bUrl, x, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 7 } })).status, 202);
  await waitFor(() => xCall.state.settled, 10_000, "X's call ended by its cancel that reached replica B");
  t.is(xCall.state.result?.content?.[0]?.text, 'The call was cancelled');
  await waitFor(() => page.open() === 0, 10_000, 'both page fetches stopped');
  await Promise.all([xCall.done, yCall.done]);
});

test.serial('a cancel reaching the replica running the call stops it there at once', async (t) => {
  const x = await createTestUser(a.runtime.db.knex);
  const before = page.requests();
  const call = slowCall(x, 9, '/local');
  await waitFor(() => page.requests() >= before + 1, 10_000, 'the call fetching its page');
  t.is((await rpc(a.url, x, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 9 } })).status, 202);
  await waitFor(() => call.state.settled, 10_000, 'the call ended by the local cancel');
  t.is(call.state.result?.content?.[0]?.text, 'The call was cancelled');
  await call.done;
});

/** Cuts a replica off the broker and resolves once its bus has noticed; the returned promise settles when it is back. */
async function cutOff(proxy: UrlFaultProxy, bus: Bus): Promise<{ back: Promise<void> }> {
  let reconnected!: () => void;
  const back = new Promise<void>((resolve) => (reconnected = resolve));
  const remove = bus.onReconnect(() => {
    remove();
    reconnected();
  });
  proxy.cut();
  await waitFor(async () => bus.ping().then(() => false, () => true), 10_000, 'the bus to notice the broker is gone');
  return { back };
}

test.serial('a cancel sent to a replica cut off from the broker stops the call on the other replica once its connection is back', async (t) => {
  const x = await createTestUser(a.runtime.db.knex);
  const before = page.requests();
  const call = slowCall(x, 21, '/cut-publisher');
  await waitFor(() => page.requests() >= before + 1, 10_000, 'the call fetching its page');

  const { back } = await cutOff(proxyB, runtimeB!.bus);
  t.teardown(() => proxyB.resume());
  // B runs nothing and cannot publish now: the cancel is kept, not lost.
  t.is((await rpc(bUrl, x, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 21 } })).status, 202);
  t.false(call.state.settled, 'nothing can reach replica A while B is away from the broker');
  proxyB.resume();
  await back;
  await waitFor(() => call.state.settled, 10_000, 'the call ended by the cancel B kept');
  t.is(call.state.result?.content?.[0]?.text, 'The call was cancelled');
  await call.done;
});

test.serial('a replica cut off from the broker while it runs a call is handed the cancel published meanwhile once it is back', async (t) => {
  const x = await createTestUser(a.runtime.db.knex);
  const before = page.requests();
  const call = slowCall(x, 22, '/cut-receiver');
  await waitFor(() => page.requests() >= before + 1, 10_000, 'the call fetching its page');

  // Each replica's queue of cancels; A's loses its consumer when A's connection goes.
  const queues = await queuesStartingWith([`${a.runtime.config.BUS_QUEUE_PREFIX}mcp-tools.call-cancels.`]);
  t.is(queues.length, 2);
  const admin: ChannelModel = await amqp.connect(TEST_AMQP_URL);
  t.teardown(() => admin.close().catch(() => {}));
  const { back } = await cutOff(proxyA, a.runtime.bus);
  t.teardown(() => proxyA.resume());
  const consumers = async () => Promise.all(queues.map((q) => queueConsumers(admin, q)));
  // The broker has seen A's connection go (before, it deleted A's queue with it).
  await waitFor(async () => (await consumers()).includes(0), 10_000, "the broker to drop A's consumer");

  t.is((await rpc(bUrl, x, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 22 } })).status, 202);
  t.false(call.state.settled, 'nothing can reach replica A while it is away from the broker');
  proxyA.resume();
  await back;
  await waitFor(() => call.state.settled, 10_000, 'the call ended by the cancel published while A was away');
  t.is(call.state.result?.content?.[0]?.text, 'The call was cancelled');
  await call.done;
});

test.serial("a replica that stops cleanly deletes its queue of cancels at once, the other's stays", async (t) => {
  const queuePrefix = `${a.runtime.config.BUS_QUEUE_PREFIX}mcp-tools.call-cancels.`;
  t.is((await queuesStartingWith([queuePrefix])).length, 2);
  // Stopped as a signal stops it: the server drains, then the service's cleanups run (the bus stays open).
  await b!.server.close(1000);
  await b!.stop();
  const left = await queuesStartingWith([queuePrefix]);
  t.is(left.length, 1, "only replica A's queue is left");
  const admin: ChannelModel = await amqp.connect(TEST_AMQP_URL);
  t.teardown(() => admin.close().catch(() => {}));
  t.is(await queueConsumers(admin, left[0]!), 1, 'and A still consumes it');
  await a.stop();
  t.deepEqual(await queuesStartingWith([queuePrefix]), [], 'both replicas stopped: none is left on the broker');
});
