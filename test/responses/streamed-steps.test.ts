import { randomUUID } from 'node:crypto';
import test from 'ava';
import { checkStream, lastToolOutput, streamResponse, MODEL, startResponsesPlatform, type ResponsesPlatform } from './harness.js';

// A streaming caller's steps are streamed from the provider: each piece of text reaches the client
// as the provider writes it (not once the step is whole), through the edge with the openai SDK.
// A non-streaming caller's steps stay whole completions, with the same items in the end.
let p: ResponsesPlatform;

test.before(async () => {
  p = await startResponsesPlatform();
});
test.after.always(async () => {
  await p?.stop();
});

const deltasOf = (events: any[], outputIndex: number) => events.filter((e) => e.type === 'response.output_text.delta' && e.output_index === outputIndex).map((e) => e.delta);

test('a step\'s text arrives while the provider is still writing it; a cancel keeps it as an incomplete message', async (t) => {
  const { client } = await p.newClient();
  // Marks this test's provider request, so the abort awaited below is its own.
  const marker = `cancel-${randomUUID()}`;
  // `#hold` writes one piece of text and never finishes: only a streamed step can show it.
  const stream = await client.responses.create({ model: MODEL, input: `take your time #hold ${marker}`, tools: [], stream: true });
  const events: any[] = [];
  for await (const event of stream) {
    events.push(event);
    if (event.type === 'response.output_text.delta') await client.responses.cancel(events[0].response.id);
  }
  const final = checkStream(t, events);
  t.deepEqual(deltasOf(events, 0), ['held']);
  t.is(final.status, 'cancelled');
  t.is(final.output.length, 1);
  t.like(final.output[0], { type: 'message', status: 'incomplete' });
  t.is(final.output[0].content[0].text, 'held', 'the text written before the cancel is kept');
  await p.fake.abortedFor(marker);
  t.is(p.fake.abortsOf(marker), 1, 'the provider stream cut');
  const stored = await client.responses.retrieve(final.id);
  t.is(stored.status, 'cancelled');
  t.deepEqual(stored.output, final.output);
});

test('text before tool calls streams as its own message; blank text makes none; the items match a non-streamed run', async (t) => {
  const steps = (name: string) =>
    p.fake.script(name, [
      { content: 'Let me compute that first. ', tool_calls: [{ name: 'python_exec', arguments: { code: 'print(6*7)' } }] },
      { content: '  \n', tool_calls: [{ name: 'python_exec', arguments: { code: 'print(1)' } }] },
      { content: (m) => `The answer is ${lastToolOutput(m).match(/\d+/)?.[0]} after checking.` },
    ]);
  steps('plan-streamed');
  steps('plan-whole');
  const { client } = await p.newClient();
  const { events, final } = await streamResponse(t, client, { model: MODEL, input: 'compute #script:plan-streamed' });
  t.is(final.status, 'completed');
  t.deepEqual(
    final.output.map((i: any) => i.type),
    ['message', 'mcp_call', 'mcp_call', 'message'],
  );
  t.like(final.output[0], { status: 'completed', content: [{ text: 'Let me compute that first. ' }] });
  t.deepEqual(deltasOf(events, 0), ['Let ', 'me ', 'compute ', 'that ', 'first. '], "the provider's pieces, as written");
  t.is(deltasOf(events, 3).join(''), 'The answer is 1 after checking.');
  t.true(p.fake.scriptRequests('plan-streamed').every((r) => r.body.stream === true), 'each step streamed from the provider');

  const whole = await client.responses.create({ model: MODEL, input: 'compute #script:plan-whole' });
  t.true(p.fake.scriptRequests('plan-whole').every((r) => r.body.stream !== true), 'a non-streaming caller gets whole steps');
  // Ids are new, and a tool's output ends with its run time.
  const shape = (output: any[]) => output.map(({ id: _id, ...item }) => (typeof item.output === 'string' ? { ...item, output: item.output.replace(/\d+ ms\]$/, 'ms]') } : item));
  t.deepEqual(shape(whole.output as any[]), shape(final.output));
  t.deepEqual(whole.usage, final.usage, 'the usage of streamed steps is counted the same');
  t.true((final.usage?.total_tokens ?? 0) > 0);
});

test('a provider error in the middle of a streamed step fails the response and keeps the text so far', async (t) => {
  const { client } = await p.newClient();
  const { events, final } = await streamResponse(t, client, { model: MODEL, input: 'say something #errorevent:2', tools: [] });
  t.is(events.at(-1).type, 'response.failed');
  t.is(final.status, 'failed');
  t.is(final.error.code, 'server_error');
  t.like(final.output[0], { type: 'message', status: 'incomplete' });
  const written = deltasOf(events, 0);
  t.is(written.length, 2, 'the two pieces written before the error');
  t.is(final.output[0].content[0].text, written.join(''));
  t.is((await client.responses.retrieve(final.id)).status, 'failed');
});
