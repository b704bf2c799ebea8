/**
 * The load generator, the same code for every path: sequential requests on one keep-alive
 * connection (latency, time to first chunk), autocannon (or wrk) at 64 connections (throughput),
 * and a ramp of concurrently held streams.
 */
import { execFile, execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { Agent, request, type Dispatcher } from 'undici';
import { rssMiB, sumOverProcesses, type Peer, type Platform, type Upstream } from './procs.js';
import { softOpenFileLimit } from '../../services/gateway/connections.js';

// autocannon ships no types; loaded through require.
const autocannon = createRequire(import.meta.url)('autocannon') as (opts: Record<string, unknown>) => Promise<any>;

/** One way to reach the fake provider: directly, through our platform, or through the peer. */
export interface Target {
  name: string;
  /** URL, headers and JSON body of a chat completion whose upstream waits `delayMs` before answering. */
  chat(delayMs: number, stream: boolean, content?: string): { url: string; headers: Record<string, string>; body: string };
}

/**
 * A chat completion's JSON body: one short user message, or with `BENCH_PROMPT_KIB=N` a conversation
 * of about N KiB (a system prompt and turns of ~1 KiB, some of them not ASCII, the last the user's):
 * what a chat client sends once a conversation has a history, where a gateway's cost per request
 * grows with the body it parses, checks and forwards.
 */
export const chatBody = (model: string, stream: boolean, content = 'Say hello to the benchmark.') =>
  JSON.stringify({ model, stream, messages: [...history(Number(process.env.BENCH_PROMPT_KIB ?? 0)), { role: 'user', content: withChunks(stream, content) }] });

/**
 * With `BENCH_STREAM_CHUNKS=N`, a stream's answer is N content chunks written back to back (the fake
 * provider reads `#chunks:N` in the message) instead of 5: a long answer from a fast provider, where
 * a gateway's cost per chunk adds up. Paced streams (`#slow:…`) keep their own count.
 */
function withChunks(stream: boolean, content: string): string {
  const chunks = Number(process.env.BENCH_STREAM_CHUNKS ?? 0);
  return stream && chunks > 0 && !content.startsWith('#slow:') ? `${content} #chunks:${chunks}` : content;
}

const TURN = 'The gateway relays a conversation to the model provider and streams the answer back; ';
function history(kib: number): Array<{ role: string; content: string }> {
  if (!(kib > 0)) return [];
  const turns: Array<{ role: string; content: string }> = [{ role: 'system', content: `You are a helpful assistant. ${TURN.repeat(6)}` }];
  for (let bytes = 600, i = 0; bytes < kib * 1024; i++) {
    const text = `${TURN.repeat(11)}${i % 4 === 3 ? 'Ça marche — «ok» ✓ ' : ''}(turn ${i})`;
    turns.push({ role: i % 2 ? 'assistant' : 'user', content: text });
    bytes += Buffer.byteLength(text) + 40;
  }
  return turns;
}

/** The fake provider itself, with no gateway in front: the path every other is measured against. */
export function directTarget(upstream: Upstream): Target {
  return { name: 'direct', chat: (d, stream, content) => ({ url: `${upstream.base(d)}/chat/completions`, headers: {}, body: chatBody(`bench-d${d}`, stream, content) }) };
}

/** A bare relay in front of the fake provider (`bench/floor/proxy.mjs`), which passes the path through. */
export function relayTarget(relay: Peer): Target {
  return { name: relay.name, chat: (d, stream, content) => ({ url: `${relay.url}/d${d}/v1/chat/completions`, headers: {}, body: chatBody(`bench-d${d}`, stream, content) }) };
}

/** Portkey's gateway as a path: the OpenAI provider at the fake's address, through its custom-host header. */
export function portkeyTarget(peer: Peer, upstream: Upstream): Target {
  return {
    name: 'portkey',
    chat: (d, stream, content) => ({
      url: `${peer.url}/v1/chat/completions`,
      headers: { 'x-portkey-provider': 'openai', 'x-portkey-custom-host': upstream.base(d), authorization: 'Bearer sk-bench' },
      body: chatBody(`bench-d${d}`, stream, content),
    }),
  };
}

/** Our platform as a path: chat completions through its edge with the bench's client key (a user's), model `bench-d<delay>`. */
export function platformTarget(platform: Platform, name: string = platform.name): Target {
  return { name, chat: (d, stream, content) => ({ url: `${platform.edgeUrl}/v1/chat/completions`, headers: { 'x-api-key': platform.clientKey }, body: chatBody(`bench-d${d}`, stream, content) }) };
}

export const percentile = (sorted: number[], p: number) =>
  sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]! : Number.NaN;

export const median = (values: number[]) => {
  const finite = values.filter(Number.isFinite).sort((a, b) => a - b);
  if (!finite.length) return Number.NaN;
  const mid = finite.length >> 1;
  return finite.length % 2 ? finite[mid]! : (finite[mid - 1]! + finite[mid]!) / 2;
};

export interface LatencySample {
  /** Whole response, ms. */
  total: number[];
  /** First `data:` chunk of a stream, ms (empty for non-stream). */
  firstChunk: number[];
}

/**
 * `n` requests per target after `warmup`, interleaved one by one (target order rotates every
 * request), so every path sees the same machine noise. Each target has one keep-alive connection.
 */
export async function interleavedLatency(targets: Target[], options: { n: number; warmup: number; stream: boolean; delayMs?: number }): Promise<Map<string, LatencySample>> {
  const agents = targets.map(() => new Agent({ connections: 1, pipelining: 1, keepAliveTimeout: 60_000 }));
  const samples = new Map(targets.map((t) => [t.name, { total: [] as number[], firstChunk: [] as number[] }]));
  const calls = targets.map((t) => t.chat(options.delayMs ?? 0, options.stream));
  try {
    for (let i = 0; i < options.n + options.warmup; i++) {
      for (let k = 0; k < targets.length; k++) {
        const which = (i + k) % targets.length;
        const call = calls[which]!;
        const started = process.hrtime.bigint();
        const res = await request(call.url, { method: 'POST', headers: { 'content-type': 'application/json', ...call.headers }, body: call.body, dispatcher: agents[which] });
        let first = 0;
        let tail = '';
        if (res.statusCode !== 200) throw new Error(`${targets[which]!.name}: status ${res.statusCode}: ${(await res.body.text()).slice(0, 500)}`);
        for await (const chunk of res.body) {
          if (!first) first = Number(process.hrtime.bigint() - started) / 1e6;
          if (options.stream) tail = (tail + chunk.toString()).slice(-32);
        }
        const total = Number(process.hrtime.bigint() - started) / 1e6;
        if (options.stream && !tail.includes('[DONE]')) throw new Error(`${targets[which]!.name}: stream ended without [DONE]`);
        if (i >= options.warmup) {
          const s = samples.get(targets[which]!.name)!;
          s.total.push(total);
          if (options.stream) s.firstChunk.push(first);
        }
      }
    }
  } finally {
    await Promise.all(agents.map((a) => a.close()));
  }
  for (const s of samples.values()) {
    s.total.sort((a, b) => a - b);
    s.firstChunk.sort((a, b) => a - b);
  }
  return samples;
}

/**
 * A path's latency beside direct alone: `n` requests to direct and to `target` in turn (after
 * `warmup`), and the path's percentiles `percentiles` minus direct's in the same run, ms.
 */
export async function addedBesideDirect(direct: Target, target: Target, options: { n: number; warmup: number; stream: boolean; percentiles: number[] }): Promise<number[]> {
  const pair = await interleavedLatency([direct, target], { n: options.n, warmup: options.warmup, stream: options.stream });
  const [own, beside] = [pair.get(target.name)!.total, pair.get(direct.name)!.total];
  return options.percentiles.map((p) => percentile(own, p) - percentile(beside, p));
}

export interface ThroughputResult {
  rps: number;
  p50: number;
  p99: number;
  errors: number;
  /** Highest RSS of the watched process during the run, MiB. */
  rssPeak: number;
}

/**
 * What drives the 64-connection phase: autocannon (Node, in this process), or with `BENCH_LOAD=wrk`
 * wrk (C, one thread; Debian's package). The generator shares the two cores with every path it
 * measures; `bench/generators.ts` runs both in alternating rounds, and neither moved the ratios
 * beyond the rounds' own spread (bench/README.md, "Forty-sixth pass").
 */
export const LOAD_GENERATORS = ['autocannon', 'wrk'] as const;
export type LoadGenerator = (typeof LOAD_GENERATORS)[number];

const WRK_MISSING = 'wrk is not installed (apt-get install wrk)';

let chosen: LoadGenerator | undefined;
export function loadGenerator(): LoadGenerator {
  if (chosen) return chosen;
  const asked = (process.env.BENCH_LOAD ?? 'autocannon') as LoadGenerator;
  if (!LOAD_GENERATORS.includes(asked)) throw new Error(`BENCH_LOAD takes ${LOAD_GENERATORS.join(' or ')}, not ${asked}`);
  if (asked === 'wrk' && !wrkInstalled()) throw new Error(`BENCH_LOAD=wrk: ${WRK_MISSING}`);
  chosen = asked;
  return chosen;
}

function wrkInstalled(): boolean {
  try {
    execFileSync('wrk', ['--version'], { stdio: 'ignore' });
    return true;
  } catch (error) {
    // wrk prints its version and exits 1; only a missing binary is ENOENT.
    return (error as NodeJS.ErrnoException).code !== 'ENOENT';
  }
}

/**
 * wrk's script for one call: the request from files beside it (no escaping of the body into Lua),
 * and at the end one JSON line of what `throughput` reports. wrk counts a status outside 2xx/3xx
 * as `errors.status`, and a request still unanswered after `--timeout` as `errors.timeout`.
 */
const WRK_SCRIPT = `
local dir = os.getenv("BENCH_WRK_DIR")
local function slurp(name) local f = assert(io.open(dir .. "/" .. name, "rb")); local s = f:read("*a"); f:close(); return s end
wrk.method = "POST"
wrk.body = slurp("body")
for line in slurp("headers"):gmatch("[^\\n]+") do
  local k, v = line:match("^([^:]+): (.*)$")
  wrk.headers[k] = v
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('\\n{"requests":%d,"micros":%d,"p50":%d,"p99":%d,"errors":%d}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.status + e.timeout))
end
`;

async function wrkRun(call: { url: string; headers: Record<string, string>; body: string }, connections: number, seconds: number) {
  const dir = await mkdtemp(join(tmpdir(), 'bench-wrk-'));
  try {
    await writeFile(join(dir, 'script.lua'), WRK_SCRIPT);
    await writeFile(join(dir, 'body'), call.body);
    await writeFile(join(dir, 'headers'), Object.entries(call.headers).map(([k, v]) => `${k}: ${v}\n`).join(''));
    const { stdout } = await promisify(execFile)('wrk', ['-t1', `-c${connections}`, `-d${seconds}s`, '--timeout', '10s', '-s', join(dir, 'script.lua'), call.url], {
      env: { ...process.env, BENCH_WRK_DIR: dir },
    }).catch((error: NodeJS.ErrnoException) => {
      throw error.code === 'ENOENT' ? new Error(WRK_MISSING) : error;
    });
    const line = stdout.trim().split('\n').at(-1)!;
    const r = JSON.parse(line) as { requests: number; micros: number; p50: number; p99: number; errors: number };
    return { rps: r.requests / (r.micros / 1e6), p50: r.p50 / 1000, p99: r.p99 / 1000, errors: r.errors };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

async function autocannonRun(call: { url: string; headers: Record<string, string>; body: string }, connections: number, seconds: number) {
  const result = await autocannon({
    url: call.url,
    method: 'POST',
    connections,
    duration: seconds,
    headers: call.headers,
    body: call.body,
  });
  return { rps: result.requests.average as number, p50: result.latency.p50 as number, p99: result.latency.p99 as number, errors: (result.errors + result.non2xx + result.timeouts) as number };
}

export async function throughput(
  target: Target,
  options: { connections: number; seconds: number; delayMs: number; stream?: boolean; watchPid?: number | readonly number[]; generator?: LoadGenerator },
): Promise<ThroughputResult> {
  const chat = target.chat(options.delayMs, options.stream ?? false);
  const call = { ...chat, headers: { 'content-type': 'application/json', ...chat.headers } };
  let rssPeak = Number.NaN;
  let sampling = true;
  const sampler = (async () => {
    while (sampling && options.watchPid) {
      const rss = await rssMiB(options.watchPid);
      if (!(rss <= rssPeak)) rssPeak = rss;
      await sleep(250);
    }
  })();
  try {
    const run = (options.generator ?? loadGenerator()) === 'wrk' ? wrkRun : autocannonRun;
    return { ...(await run(call, options.connections, options.seconds)), rssPeak };
  } finally {
    sampling = false;
    await sampler;
  }
}

export interface HoldResult {
  streams: number;
  completed: number;
  stalled: number;
  failed: number;
  /** Longest wait between two chunks of one stream, ms. */
  maxGapMs: number;
  /** Longest wait for a stream's first chunk (connect, admission, upstream head), ms. */
  maxFirstMs: number;
  rssBefore: number;
  rssPeak: number;
  /** Open file descriptors of the watched process before the step and at its peak. */
  fdsBefore: number;
  fdsPeak: number;
  /** Most streams open at once: past their first chunk and not yet ended. */
  maxOpen: number;
  firstError?: string;
}

/** Open file descriptors (Linux /proc), of one process or several summed; NaN once one is gone. */
export function openFds(pids: number | readonly number[]): Promise<number> {
  return sumOverProcesses(pids, async (pid) => (await readdir(`/proc/${pid}/fd`).catch(() => undefined))?.length ?? Number.NaN);
}

/** The soft limit on open files of a process (`Max open files` in /proc/<pid>/limits), or NaN. */
export async function fdLimit(pid: number): Promise<number> {
  try {
    return softOpenFileLimit(await readFile(`/proc/${pid}/limits`, 'utf8'));
  } catch {
    return Number.NaN;
  }
}

/** Local ports the kernel hands out to outgoing connections (one per connection to a given address and port). */
export async function ephemeralPorts(): Promise<number> {
  try {
    const [low, high] = (await readFile('/proc/sys/net/ipv4/ip_local_port_range', 'utf8')).trim().split(/\s+/).map(Number);
    return high! - low! + 1;
  } catch {
    return Number.NaN;
  }
}

/**
 * Why a ramp step did not hold all its streams, from what failed first: the edge's connection
 * bound, the descriptor limit (of the platform or of this load generator), ephemeral ports, a
 * refused or reset connection, or a stall (the streams completed but waited more than the stall
 * limit between two chunks).
 */
export function rampStopReason(step: HoldResult, stallMs: number, platformFdLimit: number): string {
  const error = step.firstError ?? '';
  if (/EMFILE|ENFILE|too many open files/i.test(error)) return `file descriptor limit (${error})`;
  if (/EADDRNOTAVAIL/i.test(error)) return `ephemeral ports exhausted (${error})`;
  if (step.failed > 0 && /^status 503\b/.test(error)) {
    // The edge answers 503 on connections beyond EDGE_MAX_CONNECTIONS (by default half of what its
    // open-file limit leaves after a reserve), before the limit itself would cut them unanswered.
    return `the edge's connection bound (${step.failed} streams answered 503, EDGE_MAX_CONNECTIONS; ${step.fdsPeak} of ${platformFdLimit} descriptors open)`;
  }
  if (step.failed > 0 && Number.isFinite(platformFdLimit) && step.fdsPeak >= platformFdLimit - 16) {
    return `the platform reached its file descriptor limit (${step.fdsPeak} of ${platformFdLimit} open; ${step.failed} streams failed: ${error})`;
  }
  if (step.failed > 0 && /ECONNRESET|socket hang up|other side closed/i.test(error) && step.maxFirstMs > 10_000) {
    // The server's header timeout (HTTP_HEADERS_TIMEOUT_MS) cuts a connection whose request it has not
    // read in time: under a burst of thousands of connections on a starved CPU, that is the first limit.
    return `${step.failed} connections reset before their request was read (${error}; slowest first chunk ${step.maxFirstMs} ms: the platform could not read requests fast enough while the step opened)`;
  }
  if (step.failed > 0) return `${step.failed} streams failed (${error})`;
  if (step.stalled > 0) return `${step.stalled} streams stalled (a gap over ${stallMs} ms between two chunks; longest ${step.maxGapMs} ms)`;
  return 'unknown';
}

/**
 * One streamed POST read chunk by chunk through undici's dispatch handler, without the Readable that
 * `request()` wraps a body in: the ramp's client holds thousands of streams on the same two cores as
 * the path it measures, and per relayed chunk the Readable, its async iterator and a decoded string
 * cost it about as much as the fake provider's write of the chunk (`bench/held-cpu.ts` prints both),
 * CPU taken from whichever path is being ramped. `onChunk` runs for each chunk of the body; the
 * status and the body's last 32 bytes (where `[DONE]` stands) are what it returns.
 */
function readStream(agent: Agent, url: URL, headers: Record<string, string>, body: string, onChunk: () => void): Promise<{ statusCode: number; tail: string }> {
  return new Promise((resolve, reject) => {
    let statusCode = 0;
    let last: Buffer | undefined;
    let beforeLast: Buffer | undefined;
    const handler: Dispatcher.DispatchHandler = {
      // Its presence is how undici tells this handler API from the older one.
      onRequestStart: () => {},
      onResponseStart: (_controller, status) => {
        statusCode = status;
      },
      onResponseData: (_controller, chunk) => {
        onChunk();
        beforeLast = last;
        last = chunk;
      },
      onResponseEnd: () => {
        const ending = beforeLast && last && last.length < 32 ? Buffer.concat([beforeLast, last]) : (last ?? Buffer.alloc(0));
        resolve({ statusCode, tail: ending.subarray(-32).toString() });
      },
      onResponseError: (_controller, error) => reject(error),
    };
    agent.dispatch({ origin: url.origin, path: url.pathname + url.search, method: 'POST', headers, body, headersTimeout: 60_000, bodyTimeout: 60_000 }, handler);
  });
}

/**
 * `n` streams held at once, each one chunk every `intervalMs`. Streams are opened in batches (a
 * burst of thousands of SYNs would overflow the listen backlog and measure that instead): 250
 * every 25 ms by default, or `openPerSecond` (paced: clients arriving over time, not all in the same
 * second), in which case each stream is given enough chunks to outlast the opening plus `holdMs`,
 * so all `n` are open together at the end (`maxOpen` counts it). A stream stalls when, once started,
 * it waits more than `stallMs` between two chunks; the wait for the first chunk is reported apart
 * (it is admission, not a stall).
 */
export async function holdStreams(
  target: Target,
  options: {
    n: number;
    intervalMs: number;
    chunks: number;
    stallMs: number;
    watchPid?: number | readonly number[];
    openPerSecond?: number;
    holdMs?: number;
    /** Called once, when all `n` streams have had their first chunk (all are held at once). */
    onAllOpen?: () => void;
  },
): Promise<HoldResult> {
  const batch = options.openPerSecond ? 50 : 250;
  const pauseMs = options.openPerSecond ? (batch * 1000) / options.openPerSecond : 25;
  const chunks = options.openPerSecond ? Math.ceil(((options.n / options.openPerSecond) * 1000 + (options.holdMs ?? 4000)) / options.intervalMs) : options.chunks;
  const call = target.chat(0, true, `#slow:${options.intervalMs} #chunks:${chunks}`);
  const url = new URL(call.url);
  const headers = { 'content-type': 'application/json', ...call.headers };
  const agent = new Agent({ connections: options.n + 16, keepAliveTimeout: 5_000, connectTimeout: 30_000 });
  const rssBefore = options.watchPid ? await rssMiB(options.watchPid) : Number.NaN;
  const fdsBefore = options.watchPid ? await openFds(options.watchPid) : Number.NaN;
  let rssPeak = rssBefore;
  let fdsPeak = fdsBefore;
  let sampling = true;
  const sampler = (async () => {
    while (sampling && options.watchPid) {
      const rss = await rssMiB(options.watchPid);
      if (rss > rssPeak) rssPeak = rss;
      const fds = await openFds(options.watchPid);
      if (fds > fdsPeak) fdsPeak = fds;
      await sleep(200);
    }
  })();
  const result: HoldResult = { streams: options.n, completed: 0, stalled: 0, failed: 0, maxGapMs: 0, maxFirstMs: 0, rssBefore, rssPeak, fdsBefore, fdsPeak, maxOpen: 0 };
  let open = 0;
  const one = async () => {
    const opened = Date.now();
    let last = 0;
    let stalled = false;
    const gap = () => {
      const now = Date.now();
      if (!last) {
        result.maxFirstMs = Math.max(result.maxFirstMs, now - opened);
        if (++open > result.maxOpen) {
          result.maxOpen = open;
          if (open === options.n) options.onAllOpen?.();
        }
      } else {
        const waited = now - last;
        if (waited > result.maxGapMs) result.maxGapMs = waited;
        if (waited > options.stallMs) stalled = true;
      }
      last = now;
    };
    try {
      const { statusCode, tail } = await readStream(agent, url, headers, call.body, gap);
      if (statusCode !== 200 || !tail.includes('[DONE]')) throw new Error(`status ${statusCode}, tail ${JSON.stringify(tail)}`);
      if (stalled) result.stalled++;
      else result.completed++;
    } catch (error) {
      result.failed++;
      result.firstError ??= (error as Error).message;
    } finally {
      if (last) open--;
    }
  };
  const running: Promise<void>[] = [];
  for (let opened = 0; opened < options.n; opened += batch) {
    for (let i = opened; i < Math.min(options.n, opened + batch); i++) running.push(one());
    await sleep(pauseMs);
  }
  await Promise.all(running);
  sampling = false;
  await sampler;
  await agent.close();
  result.rssPeak = rssPeak;
  result.fdsPeak = fdsPeak;
  return result;
}

/**
 * `streams` held at once (a chunk each every `intervalMs`), and `during` run once all of them are
 * open, so what it measures is the held streams and their chunks, not their admission. The streams
 * get chunks enough for an admission of up to 2 ms a stream (plus 2 s) and the window after it;
 * a path that has not opened them all by then fails the call (the first streams would end inside
 * the window, and a count of chunks relayed in it would be wrong).
 */
export async function whileHeld<T>(target: Target, options: { streams: number; intervalMs: number; windowMs: number }, during: () => Promise<T>): Promise<{ value: T; held: HoldResult }> {
  const admissionMs = options.streams * 2 + 2000;
  const chunks = Math.ceil((admissionMs + options.windowMs + 1000) / options.intervalMs);
  let allOpen!: () => void;
  const opened = new Promise<void>((resolve) => (allOpen = resolve));
  const started = Date.now();
  const holding = holdStreams(target, { n: options.streams, intervalMs: options.intervalMs, chunks, stallMs: 1000, onAllOpen: allOpen });
  const first = await Promise.race([opened.then(() => 'open' as const), holding.then(() => 'ended' as const)]);
  if (first === 'ended' || Date.now() - started > admissionMs) {
    const held = await holding;
    throw new Error(`${target.name}: ${held.maxOpen} of ${options.streams} streams open at once within ${admissionMs} ms (${held.failed} failed${held.firstError ? `: ${held.firstError}` : ''})`);
  }
  const value = await during();
  return { value, held: await holding };
}

/**
 * The platform's event-loop delay since its previous scrape (its own metric, which the scrape
 * resets), ms by quantile: "0.5", "0.9", "0.99" and "1" (the maximum).
 */
export async function eventLoopQuantiles(metricsUrl: string): Promise<Record<string, number>> {
  const text = await (await fetch(metricsUrl)).text();
  const quantiles: Record<string, number> = {};
  for (const match of text.matchAll(/^nodejs_eventloop_delay_seconds\{[^}]*quantile="([^"]+)"[^}]*\} (\S+)$/gm)) quantiles[match[1]!] ??= Number(match[2]) * 1000;
  return quantiles;
}

/** The platform's event-loop delay p99 since its previous scrape, ms. */
export async function eventLoopP99(metricsUrl: string): Promise<number> {
  return (await eventLoopQuantiles(metricsUrl))['0.99'] ?? Number.NaN;
}

/** A steady request rate on one path for `seconds` (soak): autocannon's overallRate over a few connections. */
export async function steadyLoad(target: Target, options: { rate: number; connections: number; seconds: number; delayMs: number; stream: boolean }) {
  const call = target.chat(options.delayMs, options.stream);
  const result = await autocannon({
    url: call.url,
    method: 'POST',
    connections: options.connections,
    overallRate: options.rate,
    duration: options.seconds,
    headers: { 'content-type': 'application/json', ...call.headers },
    body: call.body,
  });
  return { requests: result.requests.total as number, errors: (result.errors + result.non2xx + result.timeouts) as number };
}
