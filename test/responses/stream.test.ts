import test from 'ava';
import { checkStream, lastToolOutput, streamResponse, MODEL, startResponsesPlatform, type ResponsesPlatform } from './harness.js';
import { waitFor } from '../helpers/wait.js';

// The Responses event stream through the edge with the official openai SDK, validated event by
// event; chaining from a streamed response; cancel of streaming and background responses with the
// in-flight upstream call aborted; a foreground client leaving stops the loop at the next step.
let p: ResponsesPlatform;

test.before(async () => {
  p = await startResponsesPlatform();
});
test.after.always(async () => {
  await p?.stop();
});

test('a 3-step loop streams exactly the Responses events; the terminal response is the stored one', async (t) => {
  p.fake.script('three-steps', [
    { tool_calls: [{ name: 'python_exec', arguments: { code: 'print(20+1)' } }] },
    { tool_calls: [{ name: 'python_exec', arguments: { code: 'print(21*2)' } }, { name: 'python_exec', arguments: { code: 'print(2)' } }] },
    { content: (m) => `Final: ${lastToolOutput(m).trim()} and a longer tail of text so that it spans more than one delta piece of sixty-four characters.` },
  ]);
  const { client } = await p.newClient();
  const { events, final } = await streamResponse(t, client, { model: MODEL, input: 'go #script:three-steps' });
  t.is(final.status, 'completed');
  t.deepEqual(
    final.output.map((i: any) => i.type),
    ['mcp_call', 'mcp_call', 'mcp_call', 'message'],
  );
  const types = events.map((e) => e.type);
  t.true(types.includes('response.mcp_call.completed'));
  t.true(types.filter((x) => x === 'response.output_text.delta').length >= 2);
  const text = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  t.is(text, final.output[3].content[0].text);
  t.is(events.find((e) => e.type === 'response.output_text.done').text, text);
  t.is(p.fake.scriptRequests('three-steps').length, 3);

  const stored = await client.responses.retrieve(final.id);
  t.deepEqual(stored.output, final.output);
});

test('the stream() helper: finalResponse() matches retrieve; a streamed id chains with previous_response_id', async (t) => {
  p.fake.script('helper', [{ tool_calls: [{ name: 'python_exec', arguments: { code: 'print(6*7)' } }] }, { content: (m) => `It is ${lastToolOutput(m).match(/\d+/)?.[0] ?? lastToolOutput(m)}` }]);
  const { client } = await p.newClient();
  const deltas: string[] = [];
  const stream = client.responses.stream({ model: MODEL, input: 'six times seven #script:helper' });
  stream.on('response.output_text.delta', (event) => void deltas.push(event.delta));
  const final = await stream.finalResponse();
  t.is(final.output_text, 'It is 42');
  t.is(deltas.join(''), 'It is 42');
  const stored = await client.responses.retrieve(final.id);
  // finalResponse() adds `parsed: null` to text parts on the client side (structured outputs); the rest is the server's.
  const withoutParsed = JSON.parse(JSON.stringify(final.output, (key, value) => (key === 'parsed' ? undefined : value)));
  t.deepEqual(stored.output, withoutParsed);
  t.is(stored.status, final.status);
  t.deepEqual(stored.usage, final.usage);

  p.fake.script('chained', [{ content: (m) => `I remember ${m.filter((x: any) => x.role !== 'system').length} messages` }]);
  const next = await client.responses.create({ model: MODEL, previous_response_id: final.id, input: 'and now? #script:chained', tools: [] });
  const sent = p.fake.scriptRequests('chained')[0]!.body.messages;
  t.regex(JSON.stringify(sent[0]), /six times seven/, 'the chained request starts from the first response');
  t.true(sent.some((m: any) => m.role === 'tool' && String(m.content).includes('42')), 'with its tool output');
  t.true(sent.some((m: any) => m.role === 'assistant' && m.content === 'It is 42'), 'and its answer');
  t.is(next.previous_response_id, final.id);
  t.is(next.output_text, `I remember ${sent.length} messages`);
});

// The three tests that hold an upstream call run one at a time: they read the fake's shared
// holding and aborted counters, which a concurrent holder would satisfy (or keep above 0) for them.
test.serial('cancel of a streaming response aborts the in-flight upstream call and keeps the partial output', async (t) => {
  p.fake.script('hold-stream', [{ tool_calls: [{ name: 'python_exec', arguments: { code: 'print(5)' } }] }, { hold: true }]);
  const { client } = await p.newClient();
  const abortedBefore = p.fake.aborted();
  const stream = await client.responses.create({ model: MODEL, input: 'wait #script:hold-stream', stream: true });
  const events: any[] = [];
  let cancelled: any;
  for await (const event of stream) {
    events.push(event);
    if (event.type === 'response.output_item.done') {
      await waitFor(() => p.fake.holding() > 0, 30_000, 'the second step reaching the upstream');
      cancelled = await client.responses.cancel(events[0].response.id);
    }
  }
  t.is(cancelled.status, 'cancelled');
  const final = checkStream(t, events);
  t.is(events.at(-1).type, 'response.incomplete');
  t.is(final.status, 'cancelled');
  t.is(final.output[0].type, 'mcp_call', 'the partial output is kept');
  t.true(String(final.output[0].output).includes('5'));
  await waitFor(() => p.fake.aborted() > abortedBefore, 30_000, 'the upstream call aborted');
  t.is(p.fake.holding(), 0);
  t.is((await client.responses.retrieve(final.id)).status, 'cancelled');
});

test.serial('background: queued at once, runs in the service, cancel aborts the upstream call', async (t) => {
  p.fake.script('bg-done', [{ tool_calls: [{ name: 'python_exec', arguments: { code: 'print(7)' } }] }, { content: 'done in the background' }]);
  const { client } = await p.newClient();
  const queued = await client.responses.create({ model: MODEL, input: 'bg #script:bg-done', background: true });
  t.is(queued.status, 'queued');
  t.true(queued.background ?? false);
  const finished = await waitFor(async () => {
    const r = await client.responses.retrieve(queued.id);
    return r.status === 'completed' ? r : null;
  });
  t.is(finished.output_text, 'done in the background');

  p.fake.script('bg-hold', [{ tool_calls: [{ name: 'python_exec', arguments: { code: 'print(8)' } }] }, { hold: true }]);
  const abortedBefore = p.fake.aborted();
  const running = await client.responses.create({ model: MODEL, input: 'bg #script:bg-hold', background: true });
  await waitFor(() => p.fake.holding() > 0, 30_000, 'the second step reaching the upstream');
  const progress = await client.responses.retrieve(running.id);
  t.is(progress.status, 'in_progress');
  t.is(progress.output[0]?.type, 'mcp_call', 'GET shows the progress');
  const cancelled = await client.responses.cancel(running.id);
  t.is(cancelled.status, 'cancelled');
  t.is(cancelled.output[0]?.type, 'mcp_call');
  await waitFor(() => p.fake.aborted() > abortedBefore, 30_000, 'the upstream call aborted');
});

test.serial('a cancel recorded by another process (the database flag) stops the loop', async (t) => {
  p.fake.script('remote-cancel', [{ hold: true }]);
  const { client } = await p.newClient();
  const abortedBefore = p.fake.aborted();
  const running = await client.responses.create({ model: MODEL, input: 'x #script:remote-cancel', background: true, tools: [] });
  await waitFor(() => p.fake.holding() > 0, 30_000, 'the step reaching the upstream');
  // What another response-api process does on POST /cancel: only the flag in the shared database.
  await p.runtime.db.knex('responses').where({ id: running.id }).update({ cancel_requested: true });
  const stopped = await waitFor(async () => {
    const r = await client.responses.retrieve(running.id);
    return r.status === 'cancelled' ? r : null;
  });
  t.is(stopped.status, 'cancelled');
  await waitFor(() => p.fake.aborted() > abortedBefore, 30_000, 'the upstream call aborted');
});

test('a foreground streaming client that leaves cancels the loop at the next step boundary', async (t) => {
  p.fake.script('leaver', [{ tool_calls: [{ name: 'python_exec', arguments: { code: 'import time; time.sleep(3); print(9)' } }] }, { content: 'never asked' }]);
  const { client } = await p.newClient();
  const stream = await client.responses.create({ model: MODEL, input: 'x #script:leaver', stream: true });
  let id = '';
  for await (const event of stream) {
    if (event.type === 'response.created') id = event.response.id;
    if (event.type === 'response.mcp_call.in_progress') break; // leaves: the SDK aborts the request
  }
  const stopped = await waitFor(async () => {
    const r = await client.responses.retrieve(id);
    return r.status !== 'in_progress' ? r : null;
  });
  t.is(stopped.status, 'cancelled');
  t.is(stopped.output[0]?.type, 'mcp_call', 'the step in flight finished and was kept');
  t.is(p.fake.scriptRequests('leaver').length, 1, 'no further step was asked');
});

test('cancel during a tool call aborts the MCP call: the response stops without waiting for the tool', async (t) => {
  p.fake.script('long-tool', [{ tool_calls: [{ name: 'python_exec', arguments: { code: 'import time; time.sleep(55); print(1)', timeout_ms: 60_000 } }] }, { content: 'never' }]);
  const { client } = await p.newClient();
  const running = await client.responses.create({ model: MODEL, input: 'x #script:long-tool', background: true });
  await waitFor(async () => {
    const r = await client.responses.retrieve(running.id);
    return (r.output[0] as any)?.status === 'in_progress';
  }, 30_000, 'the tool call running');
  const cancelled = await client.responses.cancel(running.id);
  t.is(cancelled.status, 'cancelled');
  const call = cancelled.output[0] as any;
  t.is(call.type, 'mcp_call');
  t.is(call.status, 'failed');
  t.is(call.error, 'cancelled');
  t.is(p.fake.scriptRequests('long-tool').length, 1, 'no step after the cancel');
});

test("an mcp_call's events come in OpenAI's order (in_progress, then its arguments, then its end); usage carries every token detail the SDK types", async (t) => {
  p.fake.script('mcp-order', [{ tool_calls: [{ name: 'no_such_tool', arguments: { q: 'x' } }] }, { content: 'done' }]);
  const { client } = await p.newClient();
  const { events, final } = await streamResponse(t, client, { model: MODEL, input: 'go #script:mcp-order' });
  t.is(final.output[0].type, 'mcp_call');
  t.deepEqual(
    events.filter((e) => e.output_index === 0).map((e) => e.type),
    ['response.output_item.added', 'response.mcp_call.in_progress', 'response.mcp_call_arguments.delta', 'response.mcp_call_arguments.done', 'response.mcp_call.failed', 'response.output_item.done'],
  );
  t.deepEqual(final.usage.input_tokens_details, { cached_tokens: 0, cache_write_tokens: 0 });
  t.deepEqual(final.usage.output_tokens_details, { reasoning_tokens: 0 });
});
