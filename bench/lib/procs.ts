/**
 * The processes a benchmark drives, each a child on loopback: the fake upstream, the platform in
 * production mode (compiled JavaScript from `npm run build`, NODE_ENV=production, LOG_LEVEL=info)
 * on the embedded defaults or on the local PostgreSQL / RabbitMQ / Redis, and the peer gateway.
 */
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { createWriteStream, existsSync, readFileSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import knexFactory from 'knex';
import { deleteAmqpTopology } from '../../test/helpers/amqp.js';
import { deleteRedisKeys } from '../../test/helpers/redis.js';
import { loopbackCertificate, type LoopbackCertificate } from '../../test/helpers/certificate.js';
import { TEST_AMQP_URL, TEST_DATABASE_URL, TEST_REDIS_URL } from '../../test/helpers/servers.js';
import { freePort } from '../../scripts/free-port.mjs';

export interface Proc {
  name: string;
  child: ChildProcess;
  pid: number;
  stop(): Promise<void>;
}

export { freePort };

/**
 * Every child a bench starts, until it exits. A bench that throws (a platform that fails to start,
 * say) exits without reaching its `finally`, and a child left running would keep the terminal's
 * pipe open (the fake upstream inherits stderr), so the bench would seem to hang: they die with it.
 */
const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

/** `spawn`, with the child killed when this process exits. */
function spawnTracked(command: string, args: readonly string[], options: SpawnOptions): ChildProcess {
  const child = spawn(command, args, options);
  running.add(child);
  child.once('exit', () => running.delete(child));
  return child;
}

/** CPU (user + system, ms) each thread of a process has used so far, by thread id (Linux /proc; empty once it is gone). */
export async function threadCpuMs(pid: number): Promise<Record<string, number>> {
  const tids = await readdir(`/proc/${pid}/task`).catch(() => [] as string[]);
  const spent: Record<string, number> = {};
  for (const tid of tids) {
    const stat = await readFile(`/proc/${pid}/task/${tid}/stat`, 'utf8').catch(() => '');
    if (!stat) continue;
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    spent[tid] = (Number(fields[11]) + Number(fields[12])) * 10; // USER_HZ = 100 on Linux
  }
  return spent;
}

/** CPU (ms) a process has used so far: its main thread's, all its threads' together, and each thread's. */
export async function processCpuMs(pid: number): Promise<{ main: number; all: number; threads: Record<string, number> }> {
  const threads = await threadCpuMs(pid);
  return { main: threads[String(pid)] ?? 0, all: Object.values(threads).reduce((sum, ms) => sum + ms, 0), threads };
}

/**
 * The CPU (ms) between two `processCpuMs` readings of the busiest thread other than the main one:
 * in the embedded platform its database worker (V8's helper threads each spend less), in a relay
 * the background thread it was given, if any.
 */
export function busiestOtherThreadMs(pid: number, before: Record<string, number>, after: Record<string, number>): number {
  let busiest = 0;
  for (const [tid, ms] of Object.entries(after)) if (tid !== String(pid)) busiest = Math.max(busiest, ms - (before[tid] ?? 0));
  return busiest;
}

/**
 * Busy CPU time of the whole machine so far, ms (every core: user, nice, system, irq, softirq,
 * steal, from /proc/stat): every process, the load generator and the fake provider included.
 */
export async function machineBusyMs(): Promise<number> {
  const fields = (await readFile('/proc/stat', 'utf8')).split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
  const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = fields;
  return (user + nice + system + irq + softirq + steal) * 10; // USER_HZ = 100 on Linux
}

/** The local servers the production drivers use, by process name: PostgreSQL, Redis and RabbitMQ (Erlang's VM). */
const SERVER_PROCESSES = ['postgres', 'redis-server', 'beam.smp'];

/**
 * CPU time so far of each process of the local servers, ms by pid. They are shared by every run on
 * the machine, so a window's difference counts whatever else used them too. `serversCpuSince` takes
 * the difference pid by pid: a process that started in the window counts whole, one that ended in
 * it not at all.
 */
export async function serversCpuMs(): Promise<Map<number, number>> {
  const spent = new Map<number, number>();
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const name = (await readFile(`/proc/${entry}/comm`, 'utf8').catch(() => '')).trim();
    if (!SERVER_PROCESSES.some((server) => name.startsWith(server))) continue;
    spent.set(Number(entry), (await processCpuMs(Number(entry))).all);
  }
  return spent;
}

export async function serversCpuSince(before: Map<number, number>): Promise<number> {
  let total = 0;
  for (const [pid, ms] of await serversCpuMs()) total += ms - (before.get(pid) ?? 0);
  return total;
}

/**
 * A load window that a probe preloaded into the platform counts (`bench/alloc.ts`'s sampler,
 * `bench/phases.ts`'s probe): SIGUSR2 before `load` starts it, SIGUSR2 after it makes the probe write
 * `file`, which is waited for (the probe writes once the signal is handled, up to `timeoutMs`).
 */
export async function probedWindow<T>(pid: number, file: string, load: () => Promise<T>, timeoutMs = 30_000): Promise<T> {
  process.kill(pid, 'SIGUSR2');
  const result = await load();
  process.kill(pid, 'SIGUSR2');
  for (const deadline = Date.now() + timeoutMs; !existsSync(file); await sleep(100)) {
    if (Date.now() > deadline) throw new Error(`the platform's probe wrote no ${file} within ${timeoutMs} ms`);
  }
  return result;
}

/**
 * A per-process figure over the processes that serve a path (one, or a platform's copies), summed;
 * NaN once any of them is gone, so a lost copy never reads as a smaller figure.
 */
export async function sumOverProcesses(pids: number | readonly number[], read: (pid: number) => Promise<number>): Promise<number> {
  let sum = 0;
  for (const pid of typeof pids === 'number' ? [pids] : pids) sum += await read(pid);
  return sum;
}

/** Resident set size in MiB (Linux /proc), of one process or several summed; NaN once one is gone. */
export function rssMiB(pids: number | readonly number[]): Promise<number> {
  return sumOverProcesses(pids, async (pid) => {
    const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
    return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? Number.NaN) / 1024;
  });
}

/**
 * Resident MiB of the process's WebAssembly memories (the embedded database's PostgreSQL runs in
 * one), from /proc/<pid>/smaps: V8 maps a WebAssembly memory as an anonymous read-write region
 * followed directly by a reservation of several GiB with no access (its guard region), which no
 * other allocation here looks like. 0 when there is none, NaN once the process is gone.
 */
export async function wasmResidentMiB(pid: number): Promise<number> {
  let smaps: string;
  try {
    smaps = await readFile(`/proc/${pid}/smaps`, 'utf8');
  } catch {
    return Number.NaN;
  }
  const regions: Array<{ start: bigint; end: bigint; perms: string; anonymous: boolean; rssKb: number }> = [];
  for (const line of smaps.split('\n')) {
    const head = /^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ (\d+)\s*(\S*)/.exec(line);
    if (head) regions.push({ start: BigInt(`0x${head[1]}`), end: BigInt(`0x${head[2]}`), perms: head[3]!, anonymous: head[4] === '0' && !head[5], rssKb: 0 });
    else if (line.startsWith('Rss:') && regions.length) regions.at(-1)!.rssKb = Number(/\d+/.exec(line)?.[0] ?? 0);
  }
  const guard = 4n << 30n;
  let kb = 0;
  for (let i = 0; i + 1 < regions.length; i++) {
    const r = regions[i]!;
    const next = regions[i + 1]!;
    if (r.anonymous && r.perms.startsWith('rw') && next.start === r.end && next.perms.startsWith('---') && next.end - next.start >= guard) kb += r.rssKb;
  }
  return kb / 1024;
}

/**
 * A child's stdout and stderr into one log file. Neither pipe ends the file: the first to end would,
 * and the other's last output (a wrapper's report at exit, on stderr) would then be written after
 * the end. `close()` ends the file once both are done, or after 5 s if a grandchild holds one open.
 */
function logOutput(child: ChildProcess, logFile: string): { close(): Promise<void> } {
  const log = createWriteStream(logFile);
  child.stdout!.pipe(log, { end: false });
  child.stderr!.pipe(log, { end: false });
  const closed = new Promise<void>((resolve) => child.once('close', () => resolve()));
  return {
    async close() {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([closed, new Promise<void>((resolve) => (timer = setTimeout(resolve, 5_000)))]);
      clearTimeout(timer);
      child.stdout!.unpipe(log);
      child.stderr!.unpipe(log);
      await new Promise<void>((resolve) => log.end(resolve));
    },
  };
}

function stopper(child: ChildProcess): () => Promise<void> {
  return () =>
    new Promise<void>((done) => {
      if (child.exitCode !== null || child.signalCode !== null) return done();
      const kill = setTimeout(() => child.kill('SIGKILL'), 15_000);
      child.once('exit', () => {
        clearTimeout(kill);
        done();
      });
      child.kill('SIGTERM');
    });
}

async function waitHttp(url: string, child: ChildProcess, what: string, log: () => Promise<string>, timeoutMs = 240_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`${what} exited with ${child.exitCode}:\n${(await log()).slice(-3000)}`);
    try {
      const res = await fetch(url);
      await res.arrayBuffer();
      if (res.status < 500) return;
    } catch {
      // not listening yet
    }
    await sleep(200);
  }
  throw new Error(`${what} did not answer ${url} within ${timeoutMs} ms:\n${(await log()).slice(-3000)}`);
}

/** How a platform reaches the fake provider: cleartext HTTP/1.1, h2c, or TLS (HTTP/2 or HTTP/1.1 by ALPN). */
export type ProviderTransport = 'http' | 'h2c' | 'tls';

export interface Upstream extends Proc {
  url: string;
  /** Base URL of the fake provider with this delay before the response head, over `transport` (default http). */
  base(delayMs: number, transport?: ProviderTransport): string;
}

/**
 * A platform setting of the bench's own, not the platform's: `BENCH_PROVIDER_TLS=1` registers the
 * fake provider by its TLS address, and the platform trusts the fake's certificate.
 */
export const BENCH_PROVIDER_TLS = 'BENCH_PROVIDER_TLS';

/** What the platform started with `env` uses to reach the fake provider. */
function transportOf(env: Record<string, string>): ProviderTransport {
  if (env[BENCH_PROVIDER_TLS] === '1') return 'tls';
  return env.LLM_UPSTREAM_HTTP_VERSION === '2' ? 'h2c' : 'http';
}

/** The fake provider's certificate, or undefined where openssl is missing (no TLS listener then). */
function providerCertificate(): LoopbackCertificate | undefined {
  try {
    return loopbackCertificate();
  } catch {
    return undefined;
  }
}

/** A bench script in its own process that prints `{"port"}` once listening; its loopback URL. */
async function startListening(name: string, args: string[], env?: Record<string, string>): Promise<{ child: ChildProcess; url: string; printed: Record<string, number> }> {
  const child = spawnTracked(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'], env: env && { ...process.env, ...env } });
  const line = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once('line', resolve);
    child.once('exit', (code) => reject(new Error(`${name} exited with ${code}`)));
  });
  const printed = JSON.parse(line) as { port: number } & Record<string, number>;
  return { child, url: `http://127.0.0.1:${printed.port}`, printed };
}

/** The certificate of the fake provider this bench started, which platforms reaching it over TLS trust. */
let providerCertFile: string | undefined;

export async function startUpstream(): Promise<Upstream> {
  const tls = providerCertificate();
  providerCertFile = tls?.certFile;
  const { child, url, printed } = await startListening('upstream', ['bench/upstream.mjs'], tls && { BENCH_UPSTREAM_TLS_KEY: tls.keyFile, BENCH_UPSTREAM_TLS_CERT: tls.certFile });
  const bases: Record<ProviderTransport, string | undefined> = {
    http: url,
    h2c: `http://127.0.0.1:${printed.h2Port}`,
    tls: printed.tlsPort ? `https://127.0.0.1:${printed.tlsPort}` : undefined,
  };
  const stop = stopper(child);
  return {
    name: 'upstream',
    child,
    pid: child.pid!,
    url,
    base: (d, transport = 'http') => {
      const base = bases[transport];
      if (!base) throw new Error('the fake provider has no TLS listener: openssl was not found to make its certificate');
      return `${base}/d${d}/v1`;
    },
    async stop() {
      await stop();
      tls?.remove();
    },
  };
}

/**
 * Work the floor adds to each request (`bench/cpu-budget.ts`): busy µs on the main thread, KiB
 * allocated, KiB of it kept until the answer, and busy µs on a second thread (once a second).
 */
export interface FloorLoad {
  spinMicros: number;
  allocKiB: number;
  keepKiB: number;
  backgroundMicros: number;
}

/** The bare Node proxy (`bench/floor/proxy.mjs`) in front of the fake upstream: the floor path. */
export async function startFloor(upstream: Upstream, load?: FloorLoad, name = 'floor'): Promise<Peer> {
  const env = load && { FLOOR_SPIN_US: String(load.spinMicros), FLOOR_ALLOC_KB: String(load.allocKiB), FLOOR_KEEP_KB: String(load.keepKiB), FLOOR_BACKGROUND_US: String(load.backgroundMicros) };
  const { child, url } = await startListening(name, ['bench/floor/proxy.mjs', upstream.url], env);
  return { name, child, pid: child.pid!, url, stop: stopper(child) };
}

export type PlatformMode = 'embedded' | 'production';

export interface Platform extends Proc {
  mode: PlatformMode;
  edgeUrl: string;
  llmUrl: string;
  /** The bootstrap administrator's key: registers the providers, and the bench's client when `BENCH_CLIENT_KEY=admin`. */
  adminKey: string;
  /**
   * The key the bench's load presents: by default a regular user's (a verified account's key of the
   * `pro` tier, made at start), which takes the path most clients take: counted per address before
   * authentication and per key after it. `BENCH_CLIENT_KEY=admin` (in `--env`, or the bench's own
   * environment) presents the administrator's key instead, which skips the per-address count.
   */
  clientKey: string;
  /**
   * The processes that serve: the platform's own pid, or under `PLATFORM_PROCESSES` > 1 its copies
   * (the supervisor serves nothing). Memory, descriptors and main-thread CPU are theirs, summed.
   */
  serving: number[];
  /** Where the platform's stdout and stderr go (removed by `stop` unless BENCH_KEEP_LOGS is set). */
  logFile: string;
  /** Registers the fake as providers `bench-d<delay>` (catalog sync lists model `bench-d<delay>`). */
  addProviders(upstream: Upstream, delays: number[]): Promise<void>;
}

const BASE62 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/**
 * The platform as `npm start` runs it, but from `dist/` directly so the pid is the server's.
 * Logs (pino, info, one line per request) go to a file, as they would in production.
 */
/** The Node flags of `npm start`: package.json's start script between `node` and `scripts/start.mjs`. */
export function startNodeArgs(): string[] {
  const start = (JSON.parse(readFileSync('package.json', 'utf8')) as { scripts: Record<string, string> }).scripts.start ?? '';
  const flags = /^node\s+(.*?)\s*scripts\/start\.mjs/.exec(start);
  if (!flags) throw new Error(`package.json's start script is not "node [flags] scripts/start.mjs": ${start}`);
  return flags[1]!.split(/\s+/).filter(Boolean);
}

/** `--env "KEY=value,…"` (and cpu-ab's `--a-env`/`--b-env`): settings for the platform a bench starts (an ablation). */
export function parseEnvPairs(list: string): Record<string, string> {
  return Object.fromEntries(
    list
      .split(',')
      .filter(Boolean)
      .map((pair) => {
        const at = pair.indexOf('=');
        if (at <= 0) throw new Error(`settings are KEY=value pairs, not "${pair}"`);
        return [pair.slice(0, at), pair.slice(at + 1)];
      }),
  );
}

/** The production drivers as several copies under one supervisor: a path of its own beside the modes. */
export interface SeveralProcesses {
  copies: number;
  /** "production-xN". */
  name: string;
  /** What the platform is started with for it. */
  env: Record<string, string>;
}

/** `--processes N` of `bench/run.ts` and `bench/soak.ts`: the several-process path, or undefined for 1. */
export function severalProcesses(value: string | undefined): SeveralProcesses | undefined {
  const copies = Number(value);
  if (!Number.isInteger(copies) || copies < 1) throw new Error(`--processes takes a whole number, not ${value}`);
  return copies > 1 ? { copies, name: `production-x${copies}`, env: { PLATFORM_PROCESSES: String(copies) } } : undefined;
}

/**
 * Starts the platform, once more (up to three tries, each on new ports and a new directory) when a
 * try fails: a port drawn free can be bound by another process before the platform binds it (the
 * platform then exits naming the port, and until then another server may answer the bench there).
 */
export async function startPlatform(mode: PlatformMode, extraEnv: Record<string, string> = {}, name: string = mode, entry = 'dist/services/platform/main.js'): Promise<Platform> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startPlatformOnce(mode, extraEnv, name, entry);
    } catch (error) {
      if (attempt === 3) throw error;
      process.stderr.write(`platform (${name}) did not start, trying again on other ports: ${String((error as Error).message).split('\n').slice(-2).join(' ').slice(0, 300)}\n`);
    }
  }
}

async function startPlatformOnce(mode: PlatformMode, extraEnv: Record<string, string>, name: string, entry: string): Promise<Platform> {
  // A name may hold a build's path (`bench/cpu-ab.ts --a /tmp/other/dist`): one path segment only.
  const dir = await mkdtemp(join(tmpdir(), `bench-${name.replace(/[^\w.-]+/g, '-')}-`));
  const adminKey = `sk_${Array.from({ length: 32 }, () => BASE62[randomInt(62)]).join('')}`;
  const ports = { GATEWAY_PORT: await freePort(), LLM_API_PORT: await freePort(), RESPONSE_API_PORT: await freePort(), MEDIA_API_PORT: await freePort(), MCP_TOOLS_PORT: await freePort() };
  const prefix = `bench_${process.pid}_${randomBytes(3).toString('hex')}`;
  const drivers: Record<string, string> =
    mode === 'production'
      ? {
          DATABASE_URL: process.env.BENCH_DATABASE_URL ?? TEST_DATABASE_URL,
          DATABASE_SCHEMA: prefix,
          AMQP_URL: process.env.BENCH_AMQP_URL ?? TEST_AMQP_URL,
          BUS_EXCHANGE: `${prefix}.events`,
          BUS_QUEUE_PREFIX: `${prefix}.`,
          REDIS_URL: process.env.BENCH_REDIS_URL ?? TEST_REDIS_URL,
          EDGE_REDIS_PREFIX: prefix,
        }
      : {};
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '',
    NODE_ENV: 'production',
    LOG_LEVEL: 'info',
    DATA_DIR: dir,
    BOOTSTRAP_ADMIN_API_KEY: adminKey,
    EDGE_RATE_LIMIT_IP_PER_MINUTE: '100000000',
    EDGE_RATE_LIMIT_PRO_PER_MINUTE: '100000000',
    EDGE_RATE_LIMIT_PRO_PER_DAY: '100000000',
    // Held-stream ramp: one upstream connection per stream over HTTP/1.1, as a provider would need.
    LLM_UPSTREAM_CONNECTIONS: '20000',
    // Production mode on purpose, including the embedded defaults `npm start` would refuse there.
    PRODUCTION_ALLOW: 'pglite,local-rate-limits,generated-gateway-secret,generated-master-key',
    // The fake provider is on loopback, which provider URLs may reach only when listed.
    PROVIDER_URL_ALLOW: '127.0.0.1',
    // Every bench connection comes from 127.0.0.1: one client address holding thousands of connections.
    EDGE_MAX_CONNECTIONS_PER_ADDRESS: '100000',
    EDGE_MAX_IDLE_CONNECTIONS_PER_ADDRESS: '100000',
    // GATEWAY_PORT + 100, the default, is a port no one claimed for this run.
    EDGE_METRICS_PORT: '0',
    ...Object.fromEntries(Object.entries(ports).map(([k, v]) => [k, String(v)])),
    ...drivers,
    ...extraEnv,
    // Node reads the extra trusted certificates once, when the process starts.
    ...(transportOf(extraEnv) === 'tls' && providerCertFile ? { NODE_EXTRA_CA_CERTS: providerCertFile } : {}),
  };
  const client = extraEnv.BENCH_CLIENT_KEY ?? process.env.BENCH_CLIENT_KEY ?? 'user';
  if (client !== 'user' && client !== 'admin') throw new Error(`BENCH_CLIENT_KEY is user or admin, not ${client}`);
  const logFile = join(dir, 'platform.log');
  // npm start's Node flags first, so the bench measures what users run; BENCH_PLATFORM_NODE_ARGS
  // comes after them and wins for a flag given twice (V8 keeps the last value).
  const nodeArgs = [...startNodeArgs(), ...(process.env.BENCH_PLATFORM_NODE_ARGS?.split(' ').filter(Boolean) ?? [])];
  // A command the platform runs under (`bench/instructions.ts`: valgrind), node and its arguments appended.
  const wrapper = process.env.BENCH_PLATFORM_WRAPPER?.split(' ').filter(Boolean) ?? [];
  const command = wrapper.length ? [...wrapper, process.execPath] : [process.execPath];
  const child = spawnTracked(command[0]!, [...command.slice(1), ...nodeArgs, entry], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output = logOutput(child, logFile);
  const readLog = () => readFile(logFile, 'utf8').catch(() => '');
  const edgeUrl = `http://127.0.0.1:${ports.GATEWAY_PORT}`;
  const llmUrl = `http://127.0.0.1:${ports.LLM_API_PORT}`;
  const stopChild = stopper(child);
  let serving = [child.pid!];
  let clientKey = adminKey;
  try {
    await waitHttp(`${edgeUrl}/healthz`, child, `platform (${name})`, readLog);
    // Several copies: the supervisor names them once all serve (the first answers /healthz sooner).
    if (Number(env.PLATFORM_PROCESSES ?? 1) > 1) {
      for (const deadline = Date.now() + 120_000; ; await sleep(100)) {
        const pids = /processes: \d+ \(pids ([\d, ]+)\)/.exec(await readLog())?.[1];
        if (pids) {
          serving = pids.split(', ').map(Number);
          break;
        }
        if (Date.now() > deadline || child.exitCode !== null) throw new Error(`platform (${name}): its copies did not all start:\n${(await readLog()).slice(-3000)}`);
      }
    }
    if (client === 'user') clientKey = await createUserKey(edgeUrl, adminKey);
  } catch (error) {
    await stopChild();
    await output.close();
    await rm(dir, { recursive: true, force: true });
    if (mode === 'production') await cleanupServers(prefix, drivers);
    throw error;
  }
  return {
    name,
    mode,
    child,
    pid: child.pid!,
    edgeUrl,
    llmUrl,
    adminKey,
    clientKey,
    serving,
    logFile,
    async addProviders(upstream, delays) {
      for (const delay of delays) {
        const res = await fetch(`${edgeUrl}/v1/admin/providers`, {
          method: 'POST',
          headers: { 'x-api-key': adminKey, 'content-type': 'application/json' },
          body: JSON.stringify({ name: `bench-d${delay}`, vendor: 'fake', base_url: upstream.base(delay, transportOf(env)) }),
        });
        if (res.status !== 201) throw new Error(`provider registration on ${mode} failed: ${res.status} ${await res.text()}`);
      }
      // The catalog lists a model once its provider's sync ran; wait for every one (bounded).
      // Each copy's catalog syncs on its own: ask on fresh connections, which the cluster deals out in turn.
      const deadline = Date.now() + 30_000;
      const listed = async () => {
        const res = await fetch(`${edgeUrl}/v1/models`, { headers: { 'x-api-key': adminKey, connection: 'close' } });
        return ((await res.json()) as { data?: Array<{ id: string }> }).data?.map((m) => m.id) ?? [];
      };
      for (;;) {
        let ids: string[] = [];
        let everywhere = true;
        for (let i = 0; i < 2 * serving.length && everywhere; i++) {
          ids = await listed();
          everywhere = delays.every((d) => ids.includes(`bench-d${d}`));
        }
        if (everywhere) return;
        if (Date.now() > deadline) throw new Error(`models not listed on ${mode} after 30 s: ${JSON.stringify(ids)}`);
        await sleep(250);
      }
    },
    async stop() {
      await stopChild();
      await output.close();
      if (process.env.BENCH_KEEP_LOGS) process.stderr.write(`platform (${name}) log kept in ${logFile}\n`);
      else await rm(dir, { recursive: true, force: true });
      if (mode === 'production') await cleanupServers(prefix, drivers);
    },
  };
}

/**
 * A regular user's API key, made through the edge as a client and an operator would: a guest login,
 * the guest upgraded to an account, the account verified by the administrator (so the user tier
 * applies, not the unverified one), and a `pro` key issued for it by the administrator.
 */
async function createUserKey(edgeUrl: string, adminKey: string): Promise<string> {
  const call = async <T>(path: string, headers: Record<string, string>, body?: unknown, method = 'POST'): Promise<T> => {
    const res = await fetch(`${edgeUrl}${path}`, { method, headers: { ...headers, ...(body ? { 'content-type': 'application/json' } : {}) }, body: body ? JSON.stringify(body) : undefined });
    if (!res.ok) throw new Error(`${method} ${path} while making the bench's user key: ${res.status} ${await res.text()}`);
    return (await res.json()) as T;
  };
  const guest = await call<{ access_token: string; user_id: string }>('/llm/auth/guest-login', {});
  await call('/llm/auth/upgrade', { authorization: `Bearer ${guest.access_token}` }, { email: `bench-${randomBytes(4).toString('hex')}@example.com` });
  const admin = { 'x-api-key': adminKey };
  await call(`/v1/admin/users/${guest.user_id}`, admin, { email_verified: true }, 'PATCH');
  return (await call<{ key: string }>('/v1/admin/api-keys', admin, { user_id: guest.user_id, name: 'bench client', tier: 'pro' })).key;
}

/** Removes what a production-mode run created on the shared servers (schema, exchange and queues, Redis keys). */
async function cleanupServers(name: string, drivers: Record<string, string>): Promise<void> {
  const admin = knexFactory({ client: 'pg', connection: drivers.DATABASE_URL, pool: { min: 0, max: 1 } });
  await admin.raw('drop schema if exists ?? cascade', [name]).catch(() => {});
  await admin.destroy();
  await deleteAmqpTopology(`${name}.`, `${name}.events`);
  await deleteRedisKeys(name, drivers.REDIS_URL);
}

export interface Peer extends Proc {
  url: string;
}

/**
 * Portkey's open-source gateway (devDependency), production mode, headless, on loopback. It reaches
 * the fake through `x-portkey-custom-host` (loopback is in its default trusted custom hosts).
 */
export async function startPortkey(): Promise<Peer> {
  const port = await freePort();
  const dir = await mkdtemp(join(tmpdir(), 'bench-portkey-'));
  const logFile = join(dir, 'portkey.log');
  const child = spawnTracked(
    process.execPath,
    ['--import', './bench/peer/portkey-headers-shim.mjs', 'node_modules/@portkey-ai/gateway/build/start-server.js', `--port=${port}`, '--headless'],
    { env: { PATH: process.env.PATH ?? '', NODE_ENV: 'production' }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const output = logOutput(child, logFile);
  const url = `http://127.0.0.1:${port}`;
  const stopChild = stopper(child);
  try {
    await waitHttp(`${url}/`, child, 'portkey', () => readFile(logFile, 'utf8').catch(() => ''));
  } catch (error) {
    await stopChild();
    throw error;
  }
  return {
    name: 'portkey',
    child,
    pid: child.pid!,
    url,
    async stop() {
      await stopChild();
      await output.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
