/**
 * Event pipeline benchmark (`node --import tsx bench/events/run.ts [--quick]`): outbox → bus →
 * webhook fan-out → signed delivery to a local receiver, with the platform in a child process as
 * `npm start` runs it (production poll intervals), on the embedded queue (PGlite + the
 * PostgreSQL-backed queue) and on the production drivers (PostgreSQL + RabbitMQ). Prints figures,
 * asserts nothing:
 *   1. commit-to-delivery latency, one event at a time (p50/p99): from the event's occurred_at
 *      (database time of the commit's transaction) to the receiver's arrival;
 *   2. sustained events/s: 16 API callers create conversations as fast as they can; events
 *      delivered per second from the first request to the last delivery;
 *   3. a burst of 1,000 events committed in one transaction while an API probe (GET
 *      /v1/admin/webhooks, one at a time) keeps running: drain time, and the probe's p50/p99/max
 *      against its idle figures (a stall is a probe answer slower than 1 s).
 * Env: BENCH_MODES (default `embedded,rabbitmq`).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import http from 'node:http';
import { createInterface, type Interface } from 'node:readline';
import { GATEWAY_TOKEN_HEADER, IDENTITY_HEADERS } from '../../services/kit/index.js';

const quick = process.argv.includes('--quick');
const MODES = (process.env.BENCH_MODES ?? 'embedded,rabbitmq').split(',');
const LATENCY_EVENTS = quick ? 30 : 150;
const SUSTAINED_EVENTS = quick ? 200 : 1000;
const SUSTAINED_CALLERS = 16;
const BURST = 1000;
const STALL_MS = 1000;

const pct = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
};
const f = (n: number) => (Number.isFinite(n) ? n.toFixed(1) : '–');

interface Arrival {
  eventId: string;
  type: string;
  data: any;
  occurredMs: number;
  arrivedMs: number;
}

/** The receiver: answers 204 at once and records every arrival (first one per event). */
async function startReceiver() {
  const arrivals = new Map<string, Arrival>();
  let waiters: Array<() => void> = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const arrivedMs = Date.now();
      res.writeHead(204).end();
      const envelope = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      if (!arrivals.has(envelope.id)) arrivals.set(envelope.id, { eventId: envelope.id, type: envelope.type, data: envelope.data, occurredMs: Date.parse(envelope.timestamp), arrivedMs });
      const current = waiters;
      waiters = [];
      for (const w of current) w();
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as import('node:net').AddressInfo).port;
  async function until(predicate: () => boolean, boundMs: number, what: string) {
    const deadline = Date.now() + boundMs;
    while (!predicate()) {
      if (Date.now() > deadline) throw new Error(`${what}: not reached within ${boundMs} ms`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 200);
        waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }
  return { url: `http://127.0.0.1:${port}/events`, arrivals, until, close: () => new Promise<void>((r) => {
      server.closeAllConnections();
      server.close(() => r());
    }) };
}

async function startChild(mode: string) {
  const proc: ChildProcess = spawn(process.execPath, ['--import', 'tsx', 'bench/events/platform.ts', mode], {
    stdio: ['pipe', 'pipe', 'inherit'],
    env: { ...process.env, NODE_ENV: 'test' },
  });
  const lines: Interface = createInterface({ input: proc.stdout! });
  const iterator = lines[Symbol.asyncIterator]();
  const next = async () => {
    for (;;) {
      const { value, done } = await iterator.next();
      if (done) throw new Error(`platform (${mode}) exited`);
      try {
        return JSON.parse(value);
      } catch {
        // not ours
      }
    }
  };
  const info = (await next()) as { llm: string; gatewaySecret: string; adminId: string };
  return {
    info,
    async command(body: unknown) {
      proc.stdin!.write(`${JSON.stringify(body)}\n`);
      return next();
    },
    async stop() {
      if (proc.exitCode !== null) return;
      proc.stdin!.end();
      // A platform that does not stop in time is killed: a failed run must not leave it behind.
      const killer = setTimeout(() => proc.kill('SIGKILL'), 30_000);
      await new Promise((resolve) => proc.once('exit', resolve));
      clearTimeout(killer);
    },
  };
}

async function runMode(mode: string) {
  const receiver = await startReceiver();
  const child = await startChild(mode);
  try {
    return await measure(mode, receiver, child);
  } finally {
    await child.stop();
    await receiver.close();
  }
}

async function measure(mode: string, receiver: Awaited<ReturnType<typeof startReceiver>>, child: Awaited<ReturnType<typeof startChild>>) {
  const { llm, gatewaySecret, adminId } = child.info;
  const headers = { [GATEWAY_TOKEN_HEADER]: gatewaySecret, [IDENTITY_HEADERS.authMethod]: 'jwt', [IDENTITY_HEADERS.userId]: adminId, 'content-type': 'application/json' };
  const call = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(llm + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${text}`);
    return text ? JSON.parse(text) : null;
  };
  await call('POST', '/v1/admin/webhooks', { url: receiver.url, events: ['*'] });
  const conversationDelivered = (id: string) => () => [...receiver.arrivals.values()].some((a) => a.type === 'conversation.created' && a.data?.conversation_id === id);
  const lag = (a: Arrival) => a.arrivedMs - a.occurredMs;

  // 1. One event at a time.
  const single: number[] = [];
  for (let i = 0; i < LATENCY_EVENTS; i++) {
    const conv = await call('POST', '/v1/conversations', { title: `latency ${i}` });
    await receiver.until(conversationDelivered(conv.id), 30_000, 'single delivery');
    const arrival = [...receiver.arrivals.values()].find((a) => a.data?.conversation_id === conv.id)!;
    single.push(lag(arrival));
  }

  // 2. Sustained: as fast as the API takes them.
  const before = receiver.arrivals.size;
  const started = Date.now();
  let issued = 0;
  await Promise.all(
    Array.from({ length: SUSTAINED_CALLERS }, async () => {
      while (issued < SUSTAINED_EVENTS) {
        issued++;
        await call('POST', '/v1/conversations', { title: 'sustained' });
      }
    }),
  );
  const committedIn = Date.now() - started;
  await receiver.until(() => receiver.arrivals.size - before >= SUSTAINED_EVENTS, 300_000, 'sustained deliveries');
  const sustainedArrivals = [...receiver.arrivals.values()].slice(before);
  const lastArrival = Math.max(...sustainedArrivals.map((a) => a.arrivedMs));
  const sustained = { commitsPerSecond: (SUSTAINED_EVENTS / committedIn) * 1000, deliveredPerSecond: (SUSTAINED_EVENTS / (lastArrival - started)) * 1000, lag: sustainedArrivals.map(lag) };

  // 3. Burst of 1,000 in one transaction, with an API probe running.
  const probe = async (stopWhen: () => boolean, max = Infinity) => {
    const times: number[] = [];
    while (!stopWhen() && times.length < max) {
      const t0 = performance.now();
      await call('GET', '/v1/admin/webhooks');
      times.push(performance.now() - t0);
    }
    return times;
  };
  const idle = await probe(() => false, quick ? 50 : 200);
  const burstBefore = receiver.arrivals.size;
  let drained = false;
  const probing = probe(() => drained);
  const t0 = Date.now();
  await child.command({ burst: BURST });
  const committedAt = Date.now();
  await receiver.until(() => receiver.arrivals.size - burstBefore >= BURST, 300_000, 'burst deliveries');
  drained = true;
  const underBurst = await probing;
  const burstArrivals = [...receiver.arrivals.values()].slice(burstBefore);
  const burst = {
    commitMs: committedAt - t0,
    drainMs: Math.max(...burstArrivals.map((a) => a.arrivedMs)) - committedAt,
    lag: burstArrivals.map(lag),
    idle,
    underBurst,
  };
  return { mode, single, sustained, burst };
}

const results: Awaited<ReturnType<typeof runMode>>[] = [];
for (const mode of MODES) {
  process.stderr.write(`running ${mode}…\n`);
  results.push(await runMode(mode));
}

console.log(`\nEvent pipeline (${quick ? 'quick' : 'full'} run; figures in ms unless stated)\n`);
console.log('| | ' + results.map((r) => r.mode).join(' | ') + ' |');
console.log('|---|' + results.map(() => '---').join('|') + '|');
const row = (label: string, value: (r: (typeof results)[0]) => string) => console.log(`| ${label} | ${results.map(value).join(' | ')} |`);
row(`commit → delivery, one at a time, p50 / p99 (${LATENCY_EVENTS} events)`, (r) => `${f(pct(r.single, 50))} / ${f(pct(r.single, 99))}`);
row(`sustained: API commits/s → events delivered/s (${SUSTAINED_EVENTS} events, ${SUSTAINED_CALLERS} callers)`, (r) => `${f(r.sustained.commitsPerSecond)} → ${f(r.sustained.deliveredPerSecond)}`);
row('sustained: commit → delivery p50 / p99', (r) => `${f(pct(r.sustained.lag, 50))} / ${f(pct(r.sustained.lag, 99))}`);
row(`burst of ${BURST} in one transaction: commit, drain (last delivery after commit)`, (r) => `${f(r.burst.commitMs)}, ${f(r.burst.drainMs)}`);
row('burst: events delivered/s while draining', (r) => f((BURST / r.burst.drainMs) * 1000));
row('burst: commit → delivery p50 / p99', (r) => `${f(pct(r.burst.lag, 50))} / ${f(pct(r.burst.lag, 99))}`);
row('API probe idle: p50 / p99 / max', (r) => `${f(pct(r.burst.idle, 50))} / ${f(pct(r.burst.idle, 99))} / ${f(Math.max(...r.burst.idle))}`);
row('API probe during the burst: p50 / p99 / max (n)', (r) => `${f(pct(r.burst.underBurst, 50))} / ${f(pct(r.burst.underBurst, 99))} / ${f(Math.max(...r.burst.underBurst))} (${r.burst.underBurst.length})`);
row(`API stalled (> ${STALL_MS} ms) during the burst`, (r) => (Math.max(...r.burst.underBurst) > STALL_MS ? 'YES' : 'no'));
