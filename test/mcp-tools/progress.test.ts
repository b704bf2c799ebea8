import test from 'ava';
import { Registry } from 'prom-client';
import { z } from 'zod';
import { createLogger } from '../../services/kit/index.js';
import { createToolCaller } from '../../services/mcp-tools/tools/call-tool.js';
import { createCatalog } from '../../services/mcp-tools/tools/catalog.js';
import { createToolMetrics } from '../../services/mcp-tools/tools/metrics.js';
import type { ProgressTimers } from '../../services/mcp-tools/tools/progress.js';
import { defineTool } from '../../services/mcp-tools/tools/tool.js';
import { waitFor } from '../helpers/wait.js';
import { startMcpPlatform, type McpPlatform } from '../mcp/helpers.js';
import { untilCancelledTool } from '../mcp/until-cancelled-tool.js';

// python_exec's longest run (timeout_ms 60000) is the SDK client's default request timeout, so a
// default client lost a long run. A call whose client asks for progress (a progressToken, the SDK
// client's `onprogress`) now gets progress notifications while it runs, on an SSE answer, so a
// client resetting its timeout on progress keeps waiting. The interval is 20 ms here instead of
// 10 s; the run lasts until the client cancels it, after the notifications it waits for arrived.
let p: McpPlatform;
let key: string;

test.before(async () => {
  p = await startMcpPlatform({ MCP_PROGRESS_INTERVAL_MS: '20' });
  ({ key } = await p.newUser());
});
test.after.always(async () => {
  await p?.stop();
});

/** python_exec calls that ended, whatever their outcome (a run killed by its cancel counts too). */
const pythonCallsEnded = async () => {
  const text = await (await fetch(`${p.serviceUrl('mcp-tools')}/metrics`)).text();
  const lines = text.split('\n').filter((l) => l.startsWith('mcp_tool_calls_total{') && l.includes('tool="python_exec"'));
  return lines.reduce((sum, l) => sum + Number(l.split(' ').pop()), 0);
};

test.serial('python_exec sends progress notifications to an SDK client that asked for them, until the client cancels the run', async (t) => {
  const client = await p.client(key);
  const progress: Array<{ progress: number; message?: string }> = [];
  const controller = new AbortController();
  const endedBefore = await pythonCallsEnded();
  const call = client.callTool({ name: 'python_exec', arguments: { code: 'import time\ntime.sleep(60)', timeout_ms: 60_000 } }, undefined, {
    onprogress: (notification) => void progress.push(notification),
    resetTimeoutOnProgress: true,
    signal: controller.signal,
  });
  await waitFor(() => progress.length >= 3, 20_000, 'three progress notifications');
  t.deepEqual(progress.slice(0, 3).map((n) => n.progress), [1, 2, 3]);
  t.regex(progress[0]!.message!, /python_exec is still running/);
  controller.abort('no longer needed');
  await t.throwsAsync(call);
  // The cancel reached the server: the run ended (as a cancelled call) instead of sleeping on.
  await waitFor(async () => (await pythonCallsEnded()) > endedBefore, 20_000, 'the cancelled run ending');
});

test.serial('a call asking for progress that ends before the first tick gets its result over the SSE answer', async (t) => {
  const client = await p.client(key);
  const result: any = await client.callTool({ name: 'python_exec', arguments: { code: 'print(6*7)' } }, undefined, { onprogress: () => {} });
  t.falsy(result.isError, result.content[0].text);
  t.is(result.structuredContent.stdout, '42\n');
});

test.serial('a plain JSON-RPC client sending a progressToken without accepting SSE still gets one JSON answer', async (t) => {
  const answer = await p.rpc(key, { jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'python_exec', arguments: { code: 'print(1)' }, _meta: { progressToken: 'tok' } } });
  t.is(answer.status, 200, answer.text);
  t.regex(answer.headers.get('content-type') ?? '', /application\/json/);
  t.is(answer.json.id, 7);
  t.is(answer.json.result.structuredContent.stdout, '1\n');
});

test.serial('a tools/call from a client accepting SSE but sending no progressToken is answered with one JSON body, not a stream', async (t) => {
  const answer = await p.rpc(key, { jsonrpc: '2.0', id: 'plain', method: 'tools/call', params: { name: 'python_exec', arguments: { code: 'print(2)' } } }, { accept: 'application/json, text/event-stream' });
  t.is(answer.status, 200, answer.text);
  t.regex(answer.headers.get('content-type') ?? '', /^application\/json/);
  t.is(answer.json.id, 'plain');
  t.is(answer.json.result.structuredContent.stdout, '2\n');
});

test.serial('a client that goes away from its SSE answer stops the run (no sandbox left sleeping)', async (t) => {
  const endedBefore = await pythonCallsEnded();
  const controller = new AbortController();
  const res = await fetch(`${p.url}/v1/mcp`, {
    method: 'POST',
    headers: { 'x-api-key': key, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 'gone-1', method: 'tools/call', params: { name: 'python_exec', arguments: { code: 'import time\ntime.sleep(60)', timeout_ms: 60_000 }, _meta: { progressToken: 'gone' } } }),
    signal: controller.signal,
  });
  t.is(res.status, 200);
  t.regex(res.headers.get('content-type') ?? '', /text\/event-stream/);
  const reader = res.body!.getReader();
  let seen = '';
  while (!seen.includes('notifications/progress')) {
    const { value, done } = await reader.read();
    if (done) break;
    seen += Buffer.from(value).toString('utf8');
  }
  t.regex(seen, /"progressToken":"gone"/);
  controller.abort();
  await waitFor(async () => (await pythonCallsEnded()) > endedBefore, 20_000, 'the abandoned run ending');
});

test.serial('a python_exec run the client cancels is answered "The call was cancelled", not as a program that exited 137', async (t) => {
  const call = p.rpc(key, { jsonrpc: '2.0', id: 'cancel-me', method: 'tools/call', params: { name: 'python_exec', arguments: { code: 'import time\ntime.sleep(60)', timeout_ms: 60_000 } } });
  let answered = false;
  void call.then(() => (answered = true));
  // The cancel may overtake the call it names (two requests): sent again until the call has answered.
  await waitFor(async () => {
    await p.rpc(key, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'cancel-me', reason: 'changed my mind' } });
    return answered;
  }, 20_000, 'the cancelled call answering', 100);
  const answer = await call;
  t.is(answer.json.id, 'cancel-me');
  t.true(answer.json.result.isError, answer.text);
  t.is(answer.json.result.content[0].text, 'The call was cancelled');
});

/** Timers fired by hand: `tick()` runs every live interval once. */
function manualTimers() {
  const live = new Set<{ tick: () => void }>();
  const timers: ProgressTimers = {
    setInterval: (tick) => {
      const handle = { tick };
      live.add(handle);
      return handle;
    },
    clearInterval: (handle) => void live.delete(handle as { tick: () => void }),
  };
  return { timers, live, tick: () => [...live].forEach((handle) => handle.tick()) };
}

test('progress stops when the call ends and when it is cancelled, and is never started without a progressToken', async (t) => {
  const { timers, live, tick } = manualTimers();
  let finish: () => void = () => {};
  const finishing = defineTool({
    name: 'finish',
    title: 'Finish',
    description: 'Ends when the test says.',
    input: z.object({}).strict(),
    output: z.object({}),
    annotations: {},
    run: () => new Promise<{ structured: Record<string, never>; text: string }>((resolve) => (finish = () => resolve({ structured: {}, text: 'done' }))),
  });
  const caller = createToolCaller({
    catalog: createCatalog([finishing, untilCancelledTool()]),
    switches: { isEnabled: () => true },
    metrics: createToolMetrics(new Registry()),
    logger: createLogger({ level: 'silent', name: 'progress-test' }),
    maxConcurrentCalls: 8,
    progressIntervalMs: 10_000,
    timers,
  });
  const reported: Array<[number, string]> = [];
  const reportProgress = (progress: number, message: string) => void reported.push([progress, message]);
  const signal = new AbortController().signal;

  const ended = caller({ userId: 'usr_a', requestId: 1, signal, reportProgress }, 'finish', {});
  t.is(live.size, 1);
  tick();
  tick();
  t.deepEqual(reported, [
    [1, 'finish is still running (10 s)'],
    [2, 'finish is still running (20 s)'],
  ]);
  finish();
  t.falsy((await ended).isError);
  t.is(live.size, 0, 'no ticks after the call ended');

  const cancelled = caller({ userId: 'usr_a', requestId: 2, signal, reportProgress }, 'wait', {});
  t.is(live.size, 1);
  t.true(caller.cancel('usr_a', 2));
  t.true((await cancelled).isError);
  t.is(live.size, 0, 'no ticks after the call was cancelled');

  const quiet = caller({ userId: 'usr_a', requestId: 3, signal }, 'finish', {});
  t.is(live.size, 0, 'no progress for a call whose client did not ask for it');
  finish();
  await quiet;
});
