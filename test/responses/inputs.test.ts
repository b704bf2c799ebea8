import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { NotFoundError } from 'openai';
import { randomBase62 } from '../../services/kit/index.js';
import { waitFor } from '../helpers/wait.js';
import { solidImage } from '../media/fixtures.js';
import { lastToolOutput, MODEL, processesNamed, startResponsesPlatform, type ResponsesPlatform } from './harness.js';

// Inputs and tool-call rules of the loop through the edge with the official openai SDK:
// `input_image` parts naming `jan_` media ids (resolved as the owner, refused for anyone else),
// `parallel_tool_calls: false`, and the python_exec sandbox process killed by a cancel.
let p: ResponsesPlatform;
let dataDir: string;

test.before(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'responses-inputs-'));
  p = await startResponsesPlatform({ DATA_DIR: dataDir });
});
test.after.always(async () => {
  await p?.stop();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

async function upload(key: string): Promise<string> {
  const png = await solidImage('png', 8, 8, 91);
  const res = await p.api(key, 'POST', '/v1/media/upload', { source: { type: 'base64', data: png.toString('base64') } });
  if (res.status !== 200 && res.status !== 201) throw new Error(`upload: ${res.status} ${JSON.stringify(res.json)}`);
  return res.json.id as string;
}

test('input_image parts with jan_ media ids reach the model as download URLs; the stored input keeps the ids', async (t) => {
  p.fake.script('image', [{ content: 'a small square' }]);
  const owner = await p.newClient();
  const id = await upload(owner.key);
  t.regex(id, /^jan_[0-9a-z]{26}$/);
  const response = await owner.client.responses.create({
    model: MODEL,
    tools: [],
    input: [
      {
        role: 'user',
        content: [
          { type: 'input_text', text: 'What is in these? #script:image' },
          { type: 'input_image', image_url: id, detail: 'auto' },
          { type: 'input_image', file_id: id, detail: 'low' },
        ],
      },
    ],
  });
  t.is(response.status, 'completed');
  t.is(response.output_text, 'a small square');

  const [sent] = p.fake.scriptRequests('image');
  const parts = sent!.body.messages.at(-1).content;
  t.deepEqual(
    parts.map((part: any) => part.type),
    ['text', 'image_url', 'image_url'],
  );
  for (const part of parts.slice(1)) t.regex(part.image_url.url, /^https?:\/\/.+\/v1\/media\/signed\//, 'resolved to a download URL');
  t.is(parts[2].image_url.detail, 'low');
  t.false(JSON.stringify(sent!.body).includes('jan_'), 'no media id reaches the provider');

  const items: any[] = [];
  for await (const item of owner.client.responses.inputItems.list(response.id)) items.push(item);
  t.is(items[0].content[1].image_url, id, 'the stored input keeps the id, not an expiring URL');
});

test("another user's jan_ media id is refused with a 404 naming it, before any step runs", async (t) => {
  p.fake.script('stolen', [{ content: 'must not be asked' }]);
  const owner = await p.newClient();
  const other = await p.newClient();
  const id = await upload(owner.key);
  const error = await t.throwsAsync(
    other.client.responses.create({
      model: MODEL,
      tools: [],
      input: [{ role: 'user', content: [{ type: 'input_text', text: 'look #script:stolen' }, { type: 'input_image', image_url: id, detail: 'auto' }] }],
    }),
    { instanceOf: NotFoundError },
  );
  t.true(error!.message.includes(id), error!.message);
  t.is((error as NotFoundError).param, 'input');
  t.is(p.fake.scriptRequests('stolen').length, 0, 'nothing went upstream');
  t.is(await p.runtime.db.knex('responses').where({ user_id: other.userId }).count({ n: '*' }).first().then((r: any) => Number(r.n)), 0, 'no response was created');
});

test('parallel_tool_calls: false runs one tool call per step, even when the model asks for two', async (t) => {
  p.fake.script('one-at-a-time', [
    { tool_calls: [{ name: 'python_exec', arguments: { code: 'print(11)' } }, { name: 'python_exec', arguments: { code: 'print(22)' } }] },
    { tool_calls: [{ name: 'python_exec', arguments: { code: 'print(22)' } }] },
    { content: (m) => `last output ${lastToolOutput(m).split('\n')[0]}` },
  ]);
  const { client } = await p.newClient();
  const response = await client.responses.create({ model: MODEL, input: 'two calls #script:one-at-a-time', parallel_tool_calls: false });
  t.is(response.status, 'completed');
  t.false(response.parallel_tool_calls);
  const calls = response.output.filter((item) => item.type === 'mcp_call') as any[];
  t.deepEqual(
    calls.map((call) => JSON.parse(call.arguments).code),
    ['print(11)', 'print(22)'],
    'one call per step: the second call of the first answer was not run then',
  );
  t.deepEqual(
    calls.map((call) => String(call.output).split('\n')[0]),
    ['11', '22'],
  );

  const steps = p.fake.scriptRequests('one-at-a-time');
  t.is(steps.length, 3);
  t.is(steps[0]!.body.parallel_tool_calls, false, 'the model is told too');
  for (const step of steps.slice(1)) {
    const assistantTurns = step.body.messages.filter((m: any) => m.role === 'assistant');
    t.true(assistantTurns.every((m: any) => (m.tool_calls ?? []).length <= 1), 'the history shows one call per step');
    const toolCallIds = assistantTurns.flatMap((m: any) => m.tool_calls.map((c: any) => c.id));
    const toolMessages = step.body.messages.filter((m: any) => m.role === 'tool').map((m: any) => m.tool_call_id);
    t.deepEqual(toolMessages, toolCallIds, 'every call in the history has its output');
  }
  t.is(response.output_text, 'last output 22');
});

test('cancel during python_exec kills the sandbox process', async (t) => {
  // The sandboxed code renames its own process, so the test can find exactly that process on the host.
  const marker = `rx${randomBase62(10)}`.slice(0, 12);
  const code = `open('/proc/self/comm', 'w').write(${JSON.stringify(marker)})\nimport time\ntime.sleep(55)\nprint('finished')`;
  p.fake.script('kill-sandbox', [{ tool_calls: [{ name: 'python_exec', arguments: { code, timeout_ms: 60_000 } }] }, { content: 'never asked' }]);
  const { client } = await p.newClient();
  const running = await client.responses.create({ model: MODEL, input: 'run #script:kill-sandbox', background: true });
  const pids = await waitFor(async () => {
    const found = await processesNamed(marker);
    return found.length > 0 ? found : null;
  }, 30_000, 'the sandboxed code running');
  t.is(pids.length, 1);

  const cancelled = await client.responses.cancel(running.id);
  t.is(cancelled.status, 'cancelled');
  const call = cancelled.output[0] as any;
  t.is(call.status, 'failed');
  t.is(call.error, 'cancelled');
  // The code would sleep 55 s more; its process is gone long before (the bound is well under that).
  await waitFor(async () => (await processesNamed(marker)).length === 0, 20_000, 'the sandbox process killed');
  t.deepEqual(await processesNamed(marker), []);
  t.is(p.fake.scriptRequests('kill-sandbox').length, 1, 'no step after the cancel');
});
