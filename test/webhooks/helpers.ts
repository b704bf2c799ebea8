import type { ChildProcess } from 'node:child_process';
import type { TestFn } from 'ava';
import http from 'node:http';
import { pino } from 'pino';
import { createDeliveriesStore } from '../../domains/webhooks/index.js';
import { createEgressGuard, createSecretBox, loadMasterKey, recordEvent, type BaseConfig, type Clock, type ServiceDefinition } from '../../services/kit/index.js';
import type { LlmApiResource } from '../../services/llm-api/resource.js';
import { createLlmApiService } from '../../services/llm-api/service.js';
import { webhooksResource } from '../../services/llm-api/webhooks/index.js';
import { createDeliveryHandler, type DeliverDeps } from '../../workers/webhook-delivery/deliver.js';
import { webhookDeliveryWorker } from '../../workers/webhook-delivery/index.js';
import { startTestService, type TestService } from '../helpers/env.js';
import { stackEnv, startEntryPoint } from '../helpers/process.js';
import { createTestUser, edgeHeaders, type TestUser } from '../helpers/users.js';

/** A request the local receiver got. */
export interface Received {
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  body: string;
  json: any;
  at: number;
}

export type Reply = number | { status: number; headers?: Record<string, string> } | 'hang';

/**
 * A local webhook receiver on 127.0.0.1. `respond` decides each answer (default 200); 'hang'
 * keeps the request open until `release()` or close. Tests wait on `until(predicate)`.
 */
export async function startReceiver(respond: (r: Received, index: number) => Reply | Promise<Reply> = () => 200) {
  const requests: Received[] = [];
  const waiters = new Set<() => void>();
  const hanging = new Set<http.ServerResponse>();
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const body = Buffer.concat(chunks).toString('utf8');
      let json: unknown = null;
      try {
        json = JSON.parse(body);
      } catch {}
      const received: Received = { method: req.method ?? '', path: req.url ?? '', headers: req.headers, body, json, at: Date.now() };
      requests.push(received);
      for (const w of [...waiters]) w();
      const reply = await respond(received, requests.length - 1);
      if (reply === 'hang') {
        hanging.add(res);
        res.on('close', () => hanging.delete(res));
        return;
      }
      const { status, headers } = typeof reply === 'number' ? { status: reply, headers: {} } : reply;
      res.writeHead(status, { 'content-type': 'text/plain', ...headers }).end(status < 300 ? 'ok' : 'no');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as import('node:net').AddressInfo).port;
  const until = async (predicate: (all: Received[]) => boolean, boundMs = 30_000, what = 'receiver condition'): Promise<Received[]> => {
    const deadline = Date.now() + boundMs;
    while (!predicate(requests)) {
      const remaining = deadline - Date.now();
      if (remaining <= 0) throw new Error(`${what} not reached within ${boundMs} ms (have ${requests.length} requests)`);
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          waiters.delete(done);
          resolve();
        };
        const timer = setTimeout(done, Math.min(remaining, 250));
        waiters.add(done);
      });
    }
    return requests;
  };
  return {
    port,
    url: (path = '/hook') => `http://127.0.0.1:${port}${path}`,
    requests,
    until,
    for: (webhookId: string) => requests.filter((r) => r.headers['x-webhook-id'] === webhookId),
    eventIds: () => new Set(requests.map((r) => String(r.headers['x-event-id']))),
    hanging: () => hanging.size,
    release(status = 200) {
      for (const res of [...hanging]) res.writeHead(status).end('ok');
      hanging.clear();
    },
    async close() {
      for (const res of hanging) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
export type Receiver = Awaited<ReturnType<typeof startReceiver>>;

/** llm-api with only the given resources (so these tests do not depend on unrelated resources). */
export const llmApiWith = (resources: LlmApiResource[]): ServiceDefinition => createLlmApiService(resources);

export interface Stack {
  svc: TestService;
  admin: TestUser;
  api(method: string, path: string, body?: unknown, user?: TestUser): Promise<{ status: number; body: any; headers: Headers }>;
  emit(type: string, data?: Record<string, unknown>): Promise<string>;
  stopWorker(): Promise<void>;
  startWorker(): Promise<void>;
  close(): Promise<void>;
}

/** llm-api (webhooks admin) + the delivery worker on one isolated runtime. Receivers on 127.0.0.1 are allowed by default. */
export async function startStack(options: {
  env?: Record<string, string | undefined>;
  bus?: 'amqp' | 'pg';
  service?: ServiceDefinition;
  clock?: Clock;
  worker?: boolean;
} = {}): Promise<Stack> {
  const svc = await startTestService(options.service ?? llmApiWith([webhooksResource]), {
    bus: options.bus,
    clock: options.clock,
    env: { EGRESS_ALLOW_HOSTS: '127.0.0.1', ...options.env },
  });
  let worker: { stop(): Promise<void> } | undefined;
  const admin = await createTestUser(svc.runtime.db.knex, { admin: true });
  const stack: Stack = {
    svc,
    admin,
    async api(method, path, body, user = admin) {
      const headers: Record<string, string> = edgeHeaders(svc.gatewaySecret, user);
      if (body !== undefined) headers['content-type'] = 'application/json';
      const res = await fetch(svc.url + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
      const text = await res.text();
      return { status: res.status, body: text ? JSON.parse(text) : null, headers: res.headers };
    },
    async emit(type, data = {}) {
      const id = await svc.runtime.db.knex.transaction((trx) => recordEvent(trx, type, data));
      svc.runtime.relay.kick();
      return id;
    },
    async startWorker() {
      worker = await webhookDeliveryWorker.start(svc.ctx);
    },
    async stopWorker() {
      await worker?.stop();
      worker = undefined;
    },
    async close() {
      await stack.stopWorker().catch(() => {});
      await svc.close();
    },
  };
  if (options.worker !== false) await stack.startWorker();
  return stack;
}

/**
 * The usual fixture of a file: one receiver (answering by `respond`) and one stack, started before
 * the file's tests and closed after them, any request the receiver holds released first. `use`
 * hands both to the file's own variables.
 */
export function receiverAndStack(
  test: TestFn,
  options: { respond?: Parameters<typeof startReceiver>[0]; stack?: Parameters<typeof startStack>[0] },
  use: (receiver: Receiver, stack: Stack) => void,
): void {
  let receiver: Receiver | undefined;
  let stack: Stack | undefined;
  test.before(async () => {
    receiver = await startReceiver(options.respond);
    stack = await startStack(options.stack);
    use(receiver, stack);
  });
  test.after.always(async () => {
    receiver?.release();
    await stack?.close();
    await receiver?.close();
  });
}

/** The delivery worker's own entry point in a child process, on the same schema, exchange and queues (`env` adds MASTER_KEY and settings). */
export function spawnWorker(config: BaseConfig, env: Record<string, string>): { child: ChildProcess; ready: Promise<void>; exited: Promise<unknown> } {
  const started = startEntryPoint('workers/webhook-delivery/main.ts', stackEnv(config, { EGRESS_ALLOW_HOSTS: config.EGRESS_ALLOW_HOSTS.join(','), ...env }));
  const ready = new Promise<void>((resolve, reject) => {
    // startChild's own listener ran first: stdout() already holds this chunk.
    started.process.stdout!.on('data', () => {
      if (started.stdout().includes('webhook delivery worker started')) resolve();
    });
    started.process.once('exit', (code) => reject(new Error(`worker exited (${code}) before it was ready: ${started.stderr().slice(-2000)}`)));
  });
  const exited = started.exited.then(({ code }) => code);
  return { child: started.process, ready, exited };
}

export { waitFor } from '../helpers/wait.js';

/**
 * The delivery handler over a stack's database, driven directly by a test (no worker runs), one
 * job per subscription at a time. `readOf(id)` settles once the handler has read delivery `id` with
 * its subscription: from there to its place in a subscription's waiting list it runs no I/O, so a
 * test knows a job is waiting before it changes what that job will find. `readsOf(id)` counts those reads.
 */
export function directDeliveryHandler(stack: Stack, options: Partial<DeliverDeps> = {}) {
  const store = createDeliveriesStore(stack.svc.runtime.db.knex);
  const reads = new Map<string, () => void>();
  const readCounts = new Map<string, number>();
  const handle = createDeliveryHandler({
    deliveries: {
      ...store,
      async withWebhook(id: string) {
        readCounts.set(id, (readCounts.get(id) ?? 0) + 1);
        const found = await store.withWebhook(id);
        reads.get(id)?.();
        return found;
      },
    },
    box: createSecretBox(loadMasterKey(stack.svc.runtime.config)),
    guard: createEgressGuard({ allowHosts: ['127.0.0.1'] }),
    clock: stack.svc.runtime.clock,
    logger: pino({ level: 'silent' }),
    schedule: [1000],
    timeoutMs: 20_000,
    concurrencyPerSubscription: 1,
    prefetch: 8,
    busyDelayMs: 100,
    ...options,
  });
  return { handle, readOf: (id: string) => new Promise<void>((resolve) => reads.set(id, resolve)), readsOf: (id: string) => readCounts.get(id) ?? 0 };
}
