import test from 'ava';
import { randomBase62 } from '../../services/kit/index.js';
import { waitFor } from '../helpers/wait.js';
import { lastToolOutput, MODEL, processesNamed, startResponsesPlatform, type ResponsesPlatform } from '../responses/harness.js';

// A tool call past RESPONSES_TOOL_TIMEOUT_MS: the model sees the timeout as the call's error, and
// the tool itself is stopped on mcp-tools then, not when the response ends (the SDK gives up on the
// call, but only closing its connection ends the HTTP request the tool runs for). Later calls of
// the same response still run, on a new connection.
let p: ResponsesPlatform;

test.before(async () => {
  // Long enough for the sandbox to start (and be seen) on a loaded machine before the call times out.
  p = await startResponsesPlatform({ RESPONSES_TOOL_TIMEOUT_MS: '8000' });
});
test.after.always(async () => {
  await p?.stop();
});

test('a tool call that timed out is stopped while the response goes on; the next call runs', async (t) => {
  const marker = `rt${randomBase62(10)}`.slice(0, 12);
  const slow = `open('/proc/self/comm', 'w').write(${JSON.stringify(marker)})\nimport time\ntime.sleep(55)\nprint('finished')`;
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  p.fake.script('tool-timeout', [
    { tool_calls: [{ name: 'python_exec', arguments: { code: slow, timeout_ms: 60_000 } }] },
    { tool_calls: [{ name: 'python_exec', arguments: { code: 'print(6*7)' } }] },
    { gate, content: (m) => `after the timeout: ${lastToolOutput(m).trim()}` },
  ]);
  const { client } = await p.newClient();
  const running = await client.responses.create({ model: MODEL, input: 'x #script:tool-timeout', background: true });
  await waitFor(async () => (await processesNamed(marker)).length > 0, 8_000, 'the slow code running (before its call times out)', 10);
  // The third step waits at the gate: the response is still running while the test looks.
  await waitFor(() => p.fake.scriptRequests('tool-timeout').length === 3, 30_000, 'the step after both calls');
  const progress = await client.responses.retrieve(running.id);
  t.is(progress.status, 'in_progress');
  const [timedOut, next] = progress.output as any[];
  t.like(timedOut, { type: 'mcp_call', status: 'failed', error: 'The tool did not answer within 8000 ms.' });
  t.like(next, { type: 'mcp_call', status: 'completed' });
  t.regex(String(next.output), /42/, 'a call after the timeout runs on a new connection');
  // The slow code would sleep 55 s more; its sandbox is stopped long before, with the response still running.
  await waitFor(async () => (await processesNamed(marker)).length === 0, 20_000, 'the timed-out sandbox stopped');
  t.is((await client.responses.retrieve(running.id)).status, 'in_progress');

  release();
  const done = await waitFor(async () => {
    const current = await client.responses.retrieve(running.id);
    return current.status === 'completed' ? current : null;
  }, 30_000, 'the response ending');
  t.is(done.output_text, `after the timeout: ${String(next.output).trim()}`);
});
