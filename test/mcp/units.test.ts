import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import test from 'ava';
import { pino } from 'pino';
import { z } from 'zod';
import { Registry } from 'prom-client';
import { createToolSwitchboard } from '../../services/mcp-tools/admin/tool-switches.js';
import type { ToolSettingRow, ToolSettingsStore } from '../../services/mcp-tools/admin/store.js';
import { chunkText } from '../../services/mcp-tools/file-search/chunking.js';
import { reciprocalRankFusion } from '../../services/mcp-tools/file-search/embeddings.js';
import { createBwrapSandbox } from '../../services/mcp-tools/sandbox/bwrap.js';
import { createRemoteSandbox } from '../../services/mcp-tools/sandbox/remote.js';
import { cappedCollector } from '../../services/mcp-tools/sandbox/output.js';
import { SandboxUnavailableError } from '../../services/mcp-tools/sandbox/types.js';
import { mcpToolsService } from '../../services/mcp-tools/service.js';
import { createToolCaller, HELD_CANCEL_ALLOWANCE_MS } from '../../services/mcp-tools/tools/call-tool.js';
import { createCatalog } from '../../services/mcp-tools/tools/catalog.js';
import { createToolMetrics } from '../../services/mcp-tools/tools/metrics.js';
import { defineTool } from '../../services/mcp-tools/tools/tool.js';
import { pythonExecDescription as describePythonExec } from '../../services/mcp-tools/tools/python-exec.js';
import { loadConfig, ManualClock, parseSize } from '../../services/kit/index.js';
import { mcpConfigShape } from '../../services/mcp-tools/config.js';
import { startTestService, type TestService } from '../helpers/env.js';
import { createTestUser, edgeHeaders } from '../helpers/users.js';
import { untilCancelledTool } from './until-cancelled-tool.js';

// The parts of mcp-tools that do not need the edge: the sandbox refusing to run without bwrap,
// the call path's concurrency bound and log lines, chunking, rank fusion and output capping.

const silent = pino({ level: 'silent' });

test('without bwrap the sandbox refuses to run and says why', async (t) => {
  const sandbox = await createBwrapSandbox({
    bwrapPath: '/nonexistent/bwrap', pythonPath: '/usr/bin/python3', uidBase: 62_000, slots: 1,
    memoryMb: 512, maxProcesses: 32, maxFileMb: 16, tmpMb: 64, outputLimitBytes: 65536, logger: silent,
  });
  t.regex(sandbox.unavailableReason()!, /bubblewrap \(\/nonexistent\/bwrap\) is not installed/);
  const error = await t.throwsAsync(sandbox.run({ code: 'open("/tmp/ran", "w")', timeoutMs: 1000 }));
  t.true(error instanceof SandboxUnavailableError);
  t.regex(error!.message, /never run outside the sandbox/);
});

test.serial('python_exec through the service without bwrap is an error result naming the cause; an oversized body is a JSON-RPC error', async (t) => {
  let svc: TestService | undefined;
  try {
    svc = await startTestService(mcpToolsService, { env: { SANDBOX_BWRAP_PATH: '/nonexistent/bwrap', MCP_BODY_LIMIT: '4kb' } });
    const user = await createTestUser(svc.runtime.db.knex);
    const res = await fetch(`${svc.url}/v1/mcp`, {
      method: 'POST',
      headers: { ...edgeHeaders(svc.gatewaySecret, user), 'content-type': 'application/json', accept: 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'python_exec', arguments: { code: 'print(1)' } } }),
    });
    const json: any = await res.json();
    t.true(json.result.isError);
    t.regex(json.result.content[0].text, /bubblewrap .* is not installed.*never run outside the sandbox/);
    const big = await fetch(`${svc.url}/v1/mcp`, {
      method: 'POST',
      headers: { ...edgeHeaders(svc.gatewaySecret, user), 'content-type': 'application/json', accept: 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'python_exec', arguments: { code: `print("${'x'.repeat(5000)}")` } } }),
    });
    t.is(big.status, 413);
    t.like(await big.json(), { jsonrpc: '2.0', id: null, error: { code: -32000, message: 'Request body exceeds the limit of 4096 bytes' } });
    // Direct calls without the gateway token are refused before anything else.
    const forged = await fetch(`${svc.url}/v1/mcp`, { method: 'POST', headers: { 'x-user-id': user.id, 'x-auth-method': 'jwt', 'content-type': 'application/json' }, body: '{}' });
    t.is(forged.status, 401);
  } finally {
    await svc?.close();
  }
});

function captureLogs() {
  const lines: any[] = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      for (const line of String(chunk).split('\n').filter(Boolean)) lines.push(JSON.parse(line));
      done();
    },
  });
  return { logger: pino({ level: 'info' }, stream), lines };
}

function gatedTool() {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  let started!: () => void;
  const running = new Promise<void>((resolve) => (started = resolve));
  const tool = defineTool({
    name: 'echo',
    title: 'Echo',
    description: 'Echoes its input after the gate opens.',
    input: z.object({ secret: z.string() }).strict(),
    output: z.object({ echoed: z.string() }),
    annotations: {},
    async run(_ctx, args: { secret: string }) {
      started();
      await gate;
      return { structured: { echoed: args.secret }, text: args.secret };
    },
  });
  return { tool, release, running };
}

test('past MCP_MAX_CONCURRENT_CALLS a call is "busy" at once; log lines carry tool, user, duration, outcome and never arguments or output', async (t) => {
  const { tool, release, running } = gatedTool();
  const { logger, lines } = captureLogs();
  const callTool = createToolCaller({
    catalog: createCatalog([tool]),
    switches: { isEnabled: () => true },
    metrics: createToolMetrics(new Registry()),
    logger,
    maxConcurrentCalls: 1,
  });
  const ctx = { userId: 'user_test', signal: new AbortController().signal };
  const first = callTool(ctx, 'echo', { secret: 'hunter2-argument' });
  await running;
  const busy = await callTool(ctx, 'echo', { secret: 'hunter2-argument' });
  t.true(busy.isError);
  t.regex((busy.content[0] as any).text, /busy \(1 calls in progress\); retry/);
  release();
  const done = await first;
  t.deepEqual(done.structuredContent, { echoed: 'hunter2-argument' });
  await t.throwsAsync(callTool(ctx, 'echo', { secret: 'hunter2-argument', extra: 'hunter2-extra' }), { message: /arguments/ });
  const calls = lines.filter((l) => l.msg === 'mcp tool call');
  t.deepEqual(calls.map((l) => l.outcome).sort(), ['busy', 'invalid', 'ok']);
  for (const line of calls) {
    t.is(line.tool, 'echo');
    t.is(line.user_id, 'user_test');
    t.is(typeof line.duration_ms, 'number');
  }
  t.false(JSON.stringify(lines).includes('hunter2'), 'no argument or output in the logs');
});

test("a cancel passed on from another replica stops the user's call under that id only when the call started before the other replica got the cancel (within the allowance)", async (t) => {
  const clock = new ManualClock(1_000_000);
  let started!: () => void;
  const running = new Promise<void>((resolve) => (started = resolve));
  const tool = untilCancelledTool(started);
  const callTool = createToolCaller({ catalog: createCatalog([tool]), switches: { isEnabled: () => true }, metrics: createToolMetrics(new Registry()), logger: silent, maxConcurrentCalls: 4, clock });
  const call = callTool({ userId: 'usr_x', requestId: 5, signal: new AbortController().signal }, 'wait', {});
  await running;
  clock.advance(HELD_CANCEL_ALLOWANCE_MS + 500);
  // A cancel kept while the broker was away, issued before this call began: the same user's earlier call under a reused id.
  t.false(callTool.cancelHere('usr_x', 5, 'late', 2 * HELD_CANCEL_ALLOWANCE_MS + 501));
  t.false(callTool.cancelHere('usr_y', 5, 'another user', 0));
  t.true(callTool.cancelHere('usr_x', 5, 'in time', 2 * HELD_CANCEL_ALLOWANCE_MS + 500));
  const result = await call;
  t.true(result.isError);
  t.is((result.content[0] as any).text, 'The call was cancelled');
});

test('a switch flipped while a refresh is reading is not undone by that refresh, nor a newer read by an older one; the next refresh takes the table again', async (t) => {
  const row = (enabled: boolean): ToolSettingRow => ({ name: 'python_exec', enabled, reason: null, updated_by: 'usr_admin', updated_at: new Date(0) });
  const reads: Array<(rows: ToolSettingRow[]) => void> = [];
  const store = { all: () => new Promise<ToolSettingRow[]>((resolve) => reads.push(resolve)) } as unknown as ToolSettingsStore;
  const board = createToolSwitchboard({ store, refreshMs: 60_000, logger: silent });

  const starting = board.start();
  reads.shift()!([row(false)]);
  await starting;
  t.false(board.isEnabled('python_exec'));

  // A refresh reads the table before the flip commits; the flip is applied; the stale snapshot lands.
  const stale = board.refresh();
  board.apply(row(true));
  reads.shift()!([row(false)]);
  await stale;
  t.true(board.isEnabled('python_exec'), 'the stale snapshot did not undo the flip');

  // A refresh read after the flip is the table's word again (another process may flip it back).
  const next = board.refresh();
  reads.shift()!([row(false)]);
  await next;
  t.false(board.isEnabled('python_exec'));

  // Two reads overlap (a database slower than the interval): the older one landing last is dropped.
  const older = board.refresh();
  const newer = board.refresh();
  reads.pop()!([row(true)]);
  await newer;
  reads.shift()!([row(false)]);
  await older;
  t.true(board.isEnabled('python_exec'), 'the older read did not overwrite the newer one');
  board.stop();
});

test('chunks overlap, end at boundaries, stay within the size and cover every word', (t) => {
  const sentences = Array.from({ length: 60 }, (_, i) => `Sentence number ${i} talks about topic ${i % 7} at some length.`);
  const text = sentences.join(' ');
  const chunks = chunkText(text, 300, 60);
  t.true(chunks.length > 5);
  for (const chunk of chunks) t.true(chunk.length <= 300, `${chunk.length}`);
  for (const chunk of chunks.slice(0, -1)) t.regex(chunk, /\.$/, 'ends at a sentence');
  for (let i = 1; i < chunks.length; i++) {
    const tail = chunks[i - 1]!.split(' ').slice(-3).join(' ');
    t.true(chunks[i]!.includes(tail) || chunks[i - 1]!.length < 60, 'neighbours share text');
  }
  const words = new Set(chunks.join(' ').split(/\s+/));
  for (const word of text.split(/\s+/)) t.true(words.has(word), word);
  t.deepEqual(chunkText('  \n ', 300, 60), []);
  t.deepEqual(chunkText('short', 300, 60), ['short']);
  const unbroken = chunkText('x'.repeat(1000), 300, 60);
  t.true(unbroken.every((c) => c.length <= 300));
});

test('reciprocal rank fusion rewards items ranked by both lists', (t) => {
  const fused = reciprocalRankFusion([['a', 'b', 'c'], ['c', 'a', 'd']]);
  const order = [...fused.entries()].sort((x, y) => y[1] - x[1]).map(([k]) => k);
  t.deepEqual(order, ['a', 'c', 'b', 'd']);
  t.is(fused.get('a'), 1 / 61 + 1 / 62);
});

test('output capping keeps the first bytes, counts the rest and never splits into invalid text', (t) => {
  const out = cappedCollector(5);
  out.push(Buffer.from('héllo wörld'));
  t.true(out.truncated);
  t.is(out.seen, Buffer.byteLength('héllo wörld'));
  t.is(out.text(), 'héll');
  const exact = cappedCollector(5);
  exact.push(Buffer.from('abcde'));
  t.false(exact.truncated);
});

test('the remote driver speaks SandboxFusion run_code and caps output the same way', async (t) => {
  const requests: any[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      requests.push({ path: req.url, body });
      const timedOut = body.code.includes('while True');
      res.writeHead(200, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          status: timedOut ? 'Failed' : 'Success',
          message: '',
          run_result: { status: timedOut ? 'TimeLimitExceeded' : 'Finished', execution_time: 0.01, return_code: timedOut ? null : 0, stdout: body.code.includes('big') ? 'x'.repeat(3000) : `${body.stdin}42\n`, stderr: '' },
        }),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const sandbox = createRemoteSandbox({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, slots: 2, outputLimitBytes: 1024 });
    const ok = await sandbox.run({ code: 'print(6*7)', stdin: 'in:', timeoutMs: 2000 });
    t.like(ok, { stdout: 'in:42\n', exit_code: 0, timed_out: false, truncated: false });
    t.deepEqual(requests[0], { path: '/run_code', body: { code: 'print(6*7)', language: 'python', run_timeout: 2, stdin: 'in:' } });
    const big = await sandbox.run({ code: 'big', timeoutMs: 1000 });
    t.is(big.stdout.length, 1024);
    t.true(big.truncated);
    const loop = await sandbox.run({ code: 'while True: pass', timeoutMs: 1000 });
    t.true(loop.timed_out);
    t.is(loop.exit_code, -1);
  } finally {
    server.close();
  }
});

test("python_exec's description states the sandbox's own limits (its settings), and no memory figure for a remote sandbox", (t) => {
  const local = describePythonExec({ memoryMb: 1024, outputLimitBytes: 128 * 1024 });
  t.regex(local, /1 GiB of memory, and a time limit/);
  t.regex(local, /Output beyond 128 KiB per stream is cut off\.$/);
  const remote = describePythonExec(createRemoteSandbox({ url: 'http://127.0.0.1:9', slots: 1, outputLimitBytes: 1500 }).limits);
  t.false(remote.includes('of memory'));
  t.regex(remote, /only the standard library, and a time limit; .* Output beyond 1500 bytes per stream/);
});

test('the default MCP_BODY_LIMIT holds a file_search_index call with a document of FILE_SEARCH_MAX_DOCUMENT_CHARS characters in any script', (t) => {
  const config = loadConfig(mcpConfigShape, {});
  // Three UTF-8 bytes a character (CJK), the longest a character of the Basic Multilingual Plane takes.
  const document = '文'.repeat(config.FILE_SEARCH_MAX_DOCUMENT_CHARS);
  const call = { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'file_search_index', arguments: { document_id: 'doc-1', text: document, metadata: { title: 't'.repeat(16_000) } } } };
  t.true(Buffer.byteLength(JSON.stringify(call)) <= parseSize(config.MCP_BODY_LIMIT));
});
