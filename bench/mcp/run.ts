/**
 * MCP tools benchmark (`node --import tsx bench/mcp/run.ts`): the platform runs in a child process;
 * this process is the client, speaking plain JSON-RPC over one keep-alive connection. Prints
 * figures with their targets beside them, not pass/fail:
 *   1. tools/list and a trivial tools/call (google_search with no backend configured: the whole
 *      call path, no backend I/O) through the edge and directly: p50/p99, and calls/s at 16 connections;
 *   2. call overhead: trivial tools/call directly on mcp-tools minus GET /healthz on the same service
 *      (what the MCP layer adds to a plain HTTP round trip);
 *   3. python_exec of print(1) through the edge: every run is cold (a new sandbox and interpreter), p50/p95;
 *   4. scrape of a local page through the edge: p50/p95.
 * Env: BENCH_REQUESTS (default 1000), BENCH_PYTHON (200), BENCH_SCRAPE (300), BENCH_SECONDS (5).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import { createInterface } from 'node:readline';
import { Agent, request } from 'undici';
import { edgeHeaders } from '../../test/helpers/users.js';

const autocannon = createRequire(import.meta.url)('autocannon') as (opts: Record<string, unknown>) => Promise<any>;
const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 1000);
const PYTHON = Number(process.env.BENCH_PYTHON ?? 200);
const SCRAPE = Number(process.env.BENCH_SCRAPE ?? 300);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);

async function child(script: string): Promise<{ proc: ChildProcess; info: any }> {
  const proc = spawn(process.execPath, ['--import', 'tsx', script], { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, NODE_ENV: 'test' } });
  for await (const line of createInterface({ input: proc.stdout! })) {
    try {
      return { proc, info: JSON.parse(line) };
    } catch {
      // log noise
    }
  }
  throw new Error(`${script} exited before it was ready`);
}

const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
const ms = (n: number) => `${n.toFixed(2)} ms`;
const rpc = (method: string, params: unknown = {}) => JSON.stringify({ jsonrpc: '2.0', id: 1, method, params });
const call = (name: string, args: unknown) => rpc('tools/call', { name, arguments: args });

async function timed(url: string, init: { method?: string; headers: Record<string, string>; body?: string }, n: number, warmup: number, check?: (json: any) => void): Promise<number[]> {
  const agent = new Agent({ connections: 1 });
  const out: number[] = [];
  for (let i = 0; i < n + warmup; i++) {
    const t0 = process.hrtime.bigint();
    const res = await request(url, { method: (init.method ?? 'POST') as 'POST', headers: init.headers, body: init.body, dispatcher: agent });
    const text = await res.body.text();
    const elapsed = Number(process.hrtime.bigint() - t0) / 1e6;
    if (res.statusCode !== 200) throw new Error(`status ${res.statusCode} from ${url}: ${text.slice(0, 200)}`);
    if (check && i === 0) check(JSON.parse(text));
    if (i >= warmup) out.push(elapsed);
  }
  await agent.close();
  return out.sort((a, b) => a - b);
}

async function rate(url: string, headers: Record<string, string>, body: string): Promise<{ rps: number; p99: number; errors: number }> {
  const result = await autocannon({ url, method: 'POST', connections: 16, duration: SECONDS, headers, body });
  return { rps: result.requests.average, p99: result.latency.p99, errors: result.errors + result.non2xx };
}

function row(label: string, sorted: number[], p = [50, 99], target = '') {
  const figures = p.map((q) => `p${q} ${ms(pct(sorted, q))}`).join('  ');
  console.log(`  ${label.padEnd(46)} ${figures.padEnd(30)} ${target}`);
}

const { proc, info } = await child(new URL('./platform-server.ts', import.meta.url).pathname);
try {
  const viaEdge = { 'content-type': 'application/json', accept: 'application/json', 'x-api-key': info.key };
  const direct = { 'content-type': 'application/json', accept: 'application/json', ...edgeHeaders(info.gatewaySecret, info.user, 'apikey') };
  const edgeMcp = `${info.edge}/v1/mcp`;
  const directMcp = `${info.mcp}/v1/mcp`;
  const trivial = call('google_search', { q: 'bench' });
  const isErrorResult = (json: any) => {
    if (!json.result?.isError) throw new Error(`unexpected trivial call answer ${JSON.stringify(json).slice(0, 200)}`);
  };

  console.log(`\nMCP tools benchmark (${REQUESTS} sequential requests per row, 1 keep-alive connection; machine: 2 shared cores)\n`);
  console.log('1. tools/list and a trivial tools/call');
  const listEdge = await timed(edgeMcp, { headers: viaEdge, body: rpc('tools/list') }, REQUESTS, 200);
  const listDirect = await timed(directMcp, { headers: direct, body: rpc('tools/list') }, REQUESTS, 200);
  const callEdge = await timed(edgeMcp, { headers: viaEdge, body: trivial }, REQUESTS, 200, isErrorResult);
  const callDirect = await timed(directMcp, { headers: direct, body: trivial }, REQUESTS, 200, isErrorResult);
  const health = await timed(`${info.mcp}/healthz`, { method: 'GET', headers: {} }, REQUESTS, 200);
  row('tools/list through the edge', listEdge);
  row('tools/list direct (mcp-tools only)', listDirect);
  row('trivial tools/call through the edge', callEdge);
  row('trivial tools/call direct (mcp-tools only)', callDirect);
  row('GET /healthz direct (plain HTTP baseline)', health);
  const listRate = await rate(edgeMcp, viaEdge, rpc('tools/list'));
  const callRate = await rate(edgeMcp, viaEdge, trivial);
  console.log(`  tools/list through the edge, 16 connections:  ${listRate.rps.toFixed(0)} calls/s (p99 ${listRate.p99} ms, errors ${listRate.errors})`);
  console.log(`  trivial tools/call through the edge, 16 conn.: ${callRate.rps.toFixed(0)} calls/s (p99 ${callRate.p99} ms, errors ${callRate.errors})`);

  console.log('\n2. call overhead (what the MCP layer adds to a plain HTTP round trip on the same service)');
  const overhead = pct(callDirect, 50) - pct(health, 50);
  console.log(`  trivial tools/call p50 − /healthz p50 = ${ms(overhead)}   target ≤ 2 ms ${overhead <= 2 ? '(met)' : '(NOT met)'}`);
  const edgeAdds = pct(callEdge, 50) - pct(callDirect, 50);
  console.log(`  the edge adds (auth, limits, proxy):     ${ms(edgeAdds)}`);

  console.log('\n3. python_exec of print(1) through the edge (each run cold: new sandbox + interpreter)');
  const python = await timed(edgeMcp, { headers: viaEdge, body: call('python_exec', { code: 'print(1)' }) }, PYTHON, 10, (json) => {
    if (json.result?.structuredContent?.stdout !== '1\n') throw new Error(`python_exec answered ${JSON.stringify(json).slice(0, 300)}`);
  });
  row(`python_exec print(1) through the edge, ${PYTHON} runs`, python, [50, 95], `target p50 ≤ 60 ms ${pct(python, 50) <= 60 ? '(met)' : '(NOT met)'}`);
  const pythonDirect = await timed(directMcp, { headers: direct, body: call('python_exec', { code: 'print(1)' }) }, PYTHON, 10);
  row(`python_exec print(1) direct, ${PYTHON} runs`, pythonDirect, [50, 95], '(sandbox + interpreter start, without the edge)');
  console.log('  peers: Pyodide sandboxes 1.6–3 s cold, microVM sandboxes 125–200 ms');

  console.log('\n4. scrape of a local page through the edge');
  const scrape = await timed(edgeMcp, { headers: viaEdge, body: call('scrape', { url: info.page }) }, SCRAPE, 20, (json) => {
    if (json.result?.isError) throw new Error(`scrape answered ${JSON.stringify(json).slice(0, 300)}`);
  });
  row(`scrape (readability + markdown), ${SCRAPE} runs`, scrape, [50, 95]);
  console.log('');
} finally {
  proc.kill('SIGTERM');
}
