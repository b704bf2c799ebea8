#!/usr/bin/env node
// `npm run cluster`: the platform as a small multi-node deployment on this machine, for trying
// and testing what only shows with several processes (shared limits, cross-process events).
// Two processes of every service and worker, two edges, one PostgreSQL (DATABASE_URL), one
// RabbitMQ (AMQP_URL), one Redis (REDIS_URL) and a local S3-protocol server (s3rver). Every process
// runs from source with tsx (a development checkout). The embedded edge reaches one address per
// service, so the cluster is two halves: edge A and the services of half A call instance 1 of
// every service, edge B and half B call instance 2; both halves share the database, the bus and
// Redis. Everything it creates carries one fresh prefix (database schema, exchange and queues,
// Redis keys, S3 directory) and is removed when the script stops (SIGINT or SIGTERM). The stop
// waits for the processes at most SHUTDOWN_TIMEOUT_MS + CLUSTER_STOP_MARGIN_MS (15 s), then
// SIGKILLs them; a second signal SIGKILLs them at once; a stop during the start starts nothing
// more. The removal is bounded too (CLUSTER_CLEANUP_TIMEOUT_MS): past it the script names what it
// left and exits 1. Each readiness probe waits at most CLUSTER_PROBE_TIMEOUT_MS for an answer, the
// whole start CLUSTER_READY_TIMEOUT_MS.
//
// When every process answers, it prints one line: `cluster ready {json}` with the edges' URLs,
// the services' direct URLs, the prefix and the shared gateway token. Settings in the script's own
// environment (EDGE_RATE_LIMIT_*, LOG_LEVEL, BOOTSTRAP_ADMIN_API_KEY, ...) reach every process.
import { spawn, execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { freePort } from './free-port.mjs';
import { deleteRedisKeys } from './redis-keys.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const required = (name) => {
  const value = process.env[name];
  if (!value) {
    console.error(`cluster: ${name} is required (the shared ${name === 'DATABASE_URL' ? 'PostgreSQL' : name === 'AMQP_URL' ? 'RabbitMQ' : 'Redis'} URL)`);
    process.exit(1);
  }
  return value;
};
const DATABASE_URL = required('DATABASE_URL');
const AMQP_URL = required('AMQP_URL');
const REDIS_URL = required('REDIS_URL');
// Unset or empty: the default. Anything but a whole number of milliseconds (up to a timer's longest
// delay) is refused with one line: NaN would make the wait it bounds endless.
const milliseconds = (name, fallback) => {
  const raw = process.env[name]?.trim();
  if (!raw) return fallback;
  const value = /^\d+$/.test(raw) ? Number(raw) : NaN;
  if (!(value >= 1 && value <= 2_147_483_647)) {
    console.error(`cluster: ${name} must be a whole number of milliseconds from 1 to 2147483647 (got "${raw.slice(0, 40)}")`);
    process.exit(1);
  }
  return value;
};
// The whole start: every process serving.
const READY_TIMEOUT_MS = milliseconds('CLUSTER_READY_TIMEOUT_MS', 120_000);
// The removal of what the cluster created (schema, Redis keys, exchange and queues, S3 directory),
// once the processes are gone: a server that takes the connection and never answers would hang the
// stop. rabbitmqctl alone may take 2 × 20 s.
const CLEANUP_TIMEOUT_MS = milliseconds('CLUSTER_CLEANUP_TIMEOUT_MS', 60_000);
// One readiness probe (an HTTP GET of /readyz or /healthz): a process that accepts the connection
// and never answers is asked again, not waited on for good. A setting so that a test can drive the
// bound without waiting seconds for it.
const PROBE_TIMEOUT_MS = milliseconds('CLUSTER_PROBE_TIMEOUT_MS', 5_000);
// How long a stop waits for its processes: every one bounds its own stop at SHUTDOWN_TIMEOUT_MS
// (the drain) plus 15 s (services/kit/lifecycle.ts shutdownBoundMs), so one still running past that
// hangs: it is SIGKILLed and the cleanup goes on. A SHUTDOWN_TIMEOUT_MS the processes would refuse
// leaves its default. The margin past the drain is a setting so that a test can drive the kill
// without waiting 15 s for it; below 15 s it may kill a process still closing within its own bound.
const STOP_MARGIN_MS = milliseconds('CLUSTER_STOP_MARGIN_MS', 15_000);
const STOP_BOUND_MS = (() => {
  const raw = process.env.SHUTDOWN_TIMEOUT_MS?.trim();
  const drain = raw && /^\d+$/.test(raw) ? Number(raw) : 10_000;
  return Math.min(2_147_483_647, drain + STOP_MARGIN_MS);
})();
// A process killed again and again (e.g. by the kernel's OOM killer) is not restarted forever.
const MAX_RESTARTS = 3;

const prefix = `cluster_${process.pid}_${randomBytes(3).toString('hex')}`;
const workDir = mkdtempSync(join(tmpdir(), `${prefix}-`));
const BUCKET = 'cluster-media';
const S3_KEY = 'S3RVER';


const children = [];
let stopping = false;
let s3;

function log(message) {
  process.stderr.write(`cluster: ${message}\n`);
}

/**
 * One OS process, as deployed: `node <entry>` with its own environment. `ready` resolves once it
 * serves (a log line for a worker, an HTTP probe for a server).
 *
 * Exits: a process that ends on its own (an exit code: a crash, a failed start) stops the whole
 * cluster, so a bug shows at once. A process killed by a signal the script did not send (an
 * operator or a test simulating a lost node, e.g. `kill -9`) is started again, as a supervisor
 * would, and the script prints `cluster restarted {"name","pid"}` once the new process serves.
 */
function startProcess(name, entry, env, readiness, restarts = 0) {
  // Once stopping, nothing new starts: a readiness probe that answered just as the stop began would
  // otherwise start processes the stop never sees (it has already signalled the ones it knows).
  if (stopping) throw new Error('stopping');
  // A worker's readiness is a log line at level info: keep it visible whatever LOG_LEVEL says.
  if (readiness.line && ['warn', 'error', 'fatal', 'silent'].includes(env.LOG_LEVEL)) env = { ...env, LOG_LEVEL: 'info' };
  const child = spawn(process.execPath, ['--import', 'tsx', entry], { cwd: root, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  const entryInfo = { name, child, exited: new Promise((resolve) => child.once('exit', (code, signal) => resolve({ code, signal }))) };
  child.stdout.on('data', (c) => {
    out = (out + c).slice(-20_000);
    if (process.env.CLUSTER_VERBOSE) process.stderr.write(`[${name}] ${c}`);
  });
  child.stderr.on('data', (c) => {
    err = (err + c).slice(-20_000);
    if (process.env.CLUSTER_VERBOSE) process.stderr.write(`[${name}] ${c}`);
  });
  entryInfo.exited.then(({ code, signal }) => {
    if (stopping) return;
    if (signal && restarts < MAX_RESTARTS) {
      log(`${name} killed (${signal}): restarting`);
      const again = startProcess(name, entry, env, readiness, restarts + 1);
      again.ready.then(
        () => process.stdout.write(`cluster restarted ${JSON.stringify({ name, pid: again.child.pid })}\n`),
        (error) => {
          if (stopping) return;
          log(`${name} did not come back: ${error.message}`);
          void stop(1);
        },
      );
      return;
    }
    log(`${name} exited (${code ?? signal}): ${err.slice(-2000) || out.slice(-2000)}`);
    void stop(1);
  });
  entryInfo.ready = readiness.line
    ? waitUntil(() => out.includes(readiness.line), `${name} started`)
    : readiness.probe
      ? waitUntil(readiness.probe, `${name} ready`)
      : Promise.resolve();
  children.push(entryInfo);
  return entryInfo;
}

/** `check(remainingMs)` until it is true, for at most READY_TIMEOUT_MS. */
async function waitUntil(check, what) {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (stopping) throw new Error('stopping');
    if (await check(deadline - Date.now())) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** A readiness probe: true once `url + path` answers 200, each try bounded by PROBE_TIMEOUT_MS (or less, what is left of the start). */
const answers = (url, path = '/readyz') => async (remainingMs) => {
  const signal = AbortSignal.timeout(Math.max(1, Math.min(PROBE_TIMEOUT_MS, remainingMs)));
  const response = await fetch(`${url}${path}`, { signal }).catch(() => undefined);
  await response?.body?.cancel().catch(() => {});
  return response?.status === 200;
};

/**
 * Removes what the cluster created, each kind at once and on its own, so one hung server does not
 * hold up the others. True when it ended within CLEANUP_TIMEOUT_MS; otherwise it names on stderr
 * what it left (the steps still running) and returns false. A step that fails says so and counts
 * as done: what it could not remove is in its line.
 */
async function cleanup() {
  const steps = {
    [`S3 directory ${workDir}`]: async () => {
      await s3?.close().catch(() => {});
      rmSync(workDir, { recursive: true, force: true });
    },
    [`schema ${prefix}`]: dropSchema,
    [`Redis keys ${prefix}*`]: () => deleteRedisKeys(prefix, REDIS_URL).catch((e) => log(`redis keys not removed: ${e.message}`)),
    [`exchange and queues ${prefix}.*`]: deleteQueues,
  };
  const left = new Set(Object.keys(steps));
  const done = Promise.all(
    Object.entries(steps).map(([what, step]) =>
      step()
        .catch((e) => log(`${what} not removed: ${e.message}`))
        .finally(() => left.delete(what)),
    ),
  );
  let timer;
  const late = new Promise((resolve) => (timer = setTimeout(resolve, CLEANUP_TIMEOUT_MS, 'late')));
  const outcome = await Promise.race([done, late]);
  clearTimeout(timer);
  if (outcome !== 'late') return true;
  log(`cleanup not finished after ${CLEANUP_TIMEOUT_MS} ms; left behind: ${[...left].join(', ')}`);
  return false;
}

async function dropSchema() {
  const { default: knex } = await import('knex');
  const admin = knex({ client: 'pg', connection: DATABASE_URL, pool: { min: 0, max: 1 } });
  await admin.raw('drop schema if exists ?? cascade', [prefix]).catch((e) => log(`schema not dropped: ${e.message}`));
  await admin.destroy();
}

async function deleteQueues() {
  // Queues are named after the prefix; listing them needs rabbitmqctl (best effort without it).
  const { default: amqp } = await import('amqplib');
  const list = async (what) => {
    const { stdout } = await promisify(execFile)('rabbitmqctl', [what, '-q', '--no-table-headers', 'name'], { timeout: 20_000 });
    return stdout.split('\n').map((s) => s.trim()).filter((n) => n.startsWith(`${prefix}.`));
  };
  let queues = [];
  let exchanges = [];
  try {
    queues = await list('list_queues');
    exchanges = await list('list_exchanges');
  } catch {
    log(`rabbitmqctl unavailable: queues and exchanges left behind are named ${prefix}.*`);
  }
  const connection = await amqp.connect(AMQP_URL).catch(() => undefined);
  if (connection) {
    const channel = await connection.createChannel();
    for (const q of queues) await channel.deleteQueue(q).catch(() => {});
    for (const e of new Set([...exchanges, `${prefix}.events`])) await channel.deleteExchange(e).catch(() => {});
    await connection.close().catch(() => {});
  }
}

/** SIGKILLs every process still running; true if there was one. */
function killRemaining() {
  let killed = false;
  for (const c of children) {
    if (c.child.exitCode === null && c.child.signalCode === null) {
      c.child.kill('SIGKILL');
      killed = true;
    }
  }
  return killed;
}

// The first SIGINT or SIGTERM (or a process that ended on its own) stops every process: SIGTERM,
// then up to STOP_BOUND_MS for them to end; those still running then are SIGKILLed. A second signal
// while stopping SIGKILLs them at once. Either way the cleanup runs (for at most
// CLEANUP_TIMEOUT_MS); the exit code is 1 if a process had to be killed or the cleanup did not end.
let forceStop = () => {};
async function stop(code) {
  if (stopping) return;
  stopping = true;
  for (const c of children) c.child.kill('SIGTERM');
  let timer;
  const forced = new Promise((resolve) => {
    forceStop = () => resolve(`second signal: killing the processes still running`);
    timer = setTimeout(() => resolve(`processes still running after ${STOP_BOUND_MS} ms: killing them`), STOP_BOUND_MS);
  });
  const all = Promise.all(children.map((c) => c.exited));
  const why = await Promise.race([all.then(() => undefined), forced]);
  clearTimeout(timer);
  if (why !== undefined && killRemaining()) {
    log(why);
    code = 1;
    await all;
  }
  if (!(await cleanup().catch((e) => log(`cleanup: ${e.message}`)))) code = 1;
  process.exit(code);
}
const onSignal = () => (stopping ? forceStop() : void stop(0));
process.on('SIGINT', onSignal);
process.on('SIGTERM', onSignal);

try {
  const { default: S3rver } = await import('s3rver');
  s3 = new S3rver({ address: '127.0.0.1', port: 0, silent: true, directory: join(workDir, 's3'), configureBuckets: [{ name: BUCKET }] });
  const s3Port = (await s3.run()).port;

  const services = [
    { name: 'llm-api', entry: 'services/llm-api/main.ts', portVar: 'LLM_API_PORT', urlVar: 'LLM_API_URL' },
    { name: 'response-api', entry: 'services/response-api/main.ts', portVar: 'RESPONSE_API_PORT', urlVar: 'RESPONSE_API_URL' },
    { name: 'media-api', entry: 'services/media-api/main.ts', portVar: 'MEDIA_API_PORT', urlVar: 'MEDIA_API_URL' },
    { name: 'mcp-tools', entry: 'services/mcp-tools/main.ts', portVar: 'MCP_TOOLS_PORT', urlVar: 'MCP_TOOLS_URL' },
  ];
  const workers = [
    { name: 'webhook-delivery', entry: 'workers/webhook-delivery/main.ts', readyLine: 'webhook delivery worker started' },
    { name: 'provider-sync', entry: 'workers/provider-sync/main.ts' },
    { name: 'media-dedup', entry: 'workers/media-dedup/main.ts' },
  ];
  const halves = ['a', 'b'];
  const ports = {};
  for (const half of halves) {
    ports[half] = { gateway: await freePort() };
    for (const s of services) ports[half][s.name] = await freePort();
  }
  const url = (port) => `http://127.0.0.1:${port}`;
  const shared = {
    ...process.env,
    DATABASE_URL,
    DATABASE_SCHEMA: prefix,
    DATABASE_POOL_MAX: process.env.DATABASE_POOL_MAX ?? '4',
    AMQP_URL,
    // The bus puts BUS_QUEUE_PREFIX before it: the exchange is `<prefix>.events`, as the cleanup expects.
    BUS_EXCHANGE: 'events',
    BUS_QUEUE_PREFIX: `${prefix}.`,
    REDIS_URL,
    EDGE_REDIS_PREFIX: prefix,
    GATEWAY_SHARED_SECRET: process.env.GATEWAY_SHARED_SECRET ?? randomBytes(32).toString('base64url'),
    MASTER_KEY: process.env.MASTER_KEY ?? randomBytes(32).toString('hex'),
    MEDIA_SIGNING_SECRET: process.env.MEDIA_SIGNING_SECRET ?? randomBytes(32).toString('base64url'),
    MEDIA_STORAGE: 's3',
    S3_ENDPOINT: url(s3Port),
    S3_BUCKET: BUCKET,
    S3_ACCESS_KEY_ID: S3_KEY,
    S3_SECRET_ACCESS_KEY: S3_KEY,
    S3_FORCE_PATH_STYLE: 'true',
    // The embedded edge would hand requests to services in its own process; here there are none.
    EDGE_IN_PROCESS_DISPATCH: 'false',
  };
  const envOf = (half, extra = {}) => {
    const env = { ...shared, DATA_DIR: join(workDir, `data-${half}`), GATEWAY_PORT: String(ports[half].gateway) };
    for (const s of services) {
      env[s.portVar] = String(ports[half][s.name]);
      env[s.urlVar] = url(ports[half][s.name]);
    }
    return { ...env, ...extra };
  };
  const startService = (half, s) => startProcess(`${s.name}-${half}`, s.entry, envOf(half), { probe: answers(url(ports[half][s.name])) }).ready;
  const startWorker = (half, w) => startProcess(`${w.name}-${half}`, w.entry, envOf(half), { line: w.readyLine }).ready;

  // Migrations: llm-api first (it creates the shared tables), then the first process of every
  // other service and worker (one owner each), then the second halves, which find nothing to do.
  log(`prefix ${prefix}: starting llm-api-a`);
  await startService('a', services[0]);
  await Promise.all([...services.slice(1).map((s) => startService('a', s)), startWorker('a', workers[0])]);
  for (const w of workers.slice(1)) void startWorker('a', w);
  await Promise.all([...services.map((s) => startService('b', s)), ...workers.map((w) => startWorker('b', w))]);
  await Promise.all(
    halves.map((half) => startProcess(`gateway-${half}`, 'services/gateway/main.ts', envOf(half), { probe: answers(url(ports[half].gateway), '/healthz') }).ready),
  );
  const info = {
    prefix,
    gateways: halves.map((half) => url(ports[half].gateway)),
    services: Object.fromEntries(services.map((s) => [s.name, halves.map((half) => url(ports[half][s.name]))])),
    s3: url(s3Port),
    pids: Object.fromEntries(children.map((c) => [c.name, c.child.pid])),
  };
  process.stdout.write(`cluster ready ${JSON.stringify(info)}\n`);
} catch (error) {
  if (!stopping) {
    log(`start failed: ${error.message}`);
    await stop(1);
  }
}
