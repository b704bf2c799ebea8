import test from 'ava';
import { MODEL, startResponsesPlatform, streamResponse, type ResponsesPlatform } from './harness.js';

// A model's refusal (OpenAI's structured refusal, `message.refusal` / `delta.refusal` of a chat
// completion) is the answer of its step: a `refusal` content part of the response's message, the
// `response.refusal.delta`/`.done` events on a stream, kept for chaining and in a conversation.
// And tool calls streamed without `index` (as some providers send them) are each a call of their
// own. Through the edge with the openai SDK, the fake provider writing the chunks.
let p: ResponsesPlatform;

test.before(async () => {
  p = await startResponsesPlatform();
});
test.after.always(async () => {
  await p?.stop();
});

const REFUSAL = "I'm sorry, but I can't help with that request.";
/** The last assistant turn the model was sent in a scripted conversation's `n`th request. */
const lastAssistant = (script: string, n: number) => [...p.fake.scriptRequests(script)[n]!.body.messages].reverse().find((m: any) => m.role === 'assistant');

test('a refusal answered whole: a completed message with a refusal part, no output_text; kept for previous_response_id', async (t) => {
  p.fake.script('refuse-json', [{ refusal: REFUSAL }]);
  p.fake.script('after-json', [{ content: 'Understood.' }]);
  const { client } = await p.newClient();
  const response = await client.responses.create({ model: MODEL, input: 'something forbidden #script:refuse-json', tools: [] });
  t.is(response.status, 'completed');
  t.is(response.output.length, 1);
  t.like(response.output[0], { type: 'message', role: 'assistant', status: 'completed' });
  t.deepEqual((response.output[0] as any).content, [{ type: 'refusal', refusal: REFUSAL }]);
  t.is(response.output_text, '', 'the SDK joins only output_text parts');
  t.deepEqual(await client.responses.retrieve(response.id), response);

  const next = await client.responses.create({ model: MODEL, input: 'ok then #script:after-json', previous_response_id: response.id, tools: [] });
  t.is(next.output_text, 'Understood.');
  // The history the model is sent holds the refusal as that assistant turn's text.
  t.like(lastAssistant('after-json', 0), { role: 'assistant', content: REFUSAL });
});

test('a refusal streamed: response.refusal.delta pieces inside a refusal part, then response.refusal.done; stored as streamed', async (t) => {
  p.fake.script('refuse-stream', [{ refusal: REFUSAL }]);
  const { client } = await p.newClient();
  const { events, final } = await streamResponse(t, client, { model: MODEL, input: 'something forbidden #script:refuse-stream', tools: [] });
  t.is(events.at(-1).type, 'response.completed');
  t.true(
    p.fake.scriptRequests('refuse-stream').every((r) => r.body.stream === true),
    'the step streamed from the provider',
  );
  const types = events.map((e) => e.type).filter((type) => type !== 'response.refusal.delta');
  t.deepEqual(types, [
    'response.created',
    'response.in_progress',
    'response.output_item.added',
    'response.content_part.added',
    'response.refusal.done',
    'response.content_part.done',
    'response.output_item.done',
    'response.completed',
  ]);
  const added = events.find((e) => e.type === 'response.content_part.added');
  t.deepEqual(added.part, { type: 'refusal', refusal: '' });
  t.is(added.content_index, 0);
  const deltas = events.filter((e) => e.type === 'response.refusal.delta');
  t.true(deltas.length > 1, 'the pieces as the provider wrote them');
  t.is(deltas.map((e) => e.delta).join(''), REFUSAL);
  t.true(deltas.every((e) => e.item_id === added.item_id && e.output_index === 0 && e.content_index === 0));
  t.like(events.find((e) => e.type === 'response.refusal.done'), { item_id: added.item_id, output_index: 0, content_index: 0, refusal: REFUSAL });
  t.deepEqual(events.find((e) => e.type === 'response.content_part.done').part, { type: 'refusal', refusal: REFUSAL });
  t.deepEqual(final.output[0].content, [{ type: 'refusal', refusal: REFUSAL }]);
  t.is(final.status, 'completed');
  const stored = await client.responses.retrieve(final.id);
  t.deepEqual(stored.output, final.output);
});

test('a refusal in a conversation: the conversation keeps the refusal part, and the next response there sends it as that turn', async (t) => {
  p.fake.script('refuse-conv', [{ refusal: REFUSAL }]);
  p.fake.script('after-refusal', [{ content: 'Fine.' }]);
  const { client } = await p.newClient();
  const conversation = await client.conversations.create({});
  const refused = await client.responses.create({ model: MODEL, input: 'forbidden #script:refuse-conv', conversation: conversation.id, tools: [], stream: false });
  t.is(refused.status, 'completed');
  const items: any[] = [];
  for await (const item of client.conversations.items.list(conversation.id, { order: 'asc' })) items.push(item);
  t.is(items.length, 2, JSON.stringify(items));
  t.like(items[1], { type: 'message', role: 'assistant' });
  t.deepEqual(
    items[1].content.map((part: any) => ({ type: part.type, refusal: part.refusal })),
    [{ type: 'refusal', refusal: REFUSAL }],
  );

  const next = await client.responses.create({ model: MODEL, input: 'something else #script:after-refusal', conversation: conversation.id, tools: [] });
  t.is(next.output_text, 'Fine.');
  t.like(lastAssistant('after-refusal', 0), { role: 'assistant', content: REFUSAL });
});

test('tool calls streamed without an index, the name repeated in each delta: one function_call each, named as the model named it', async (t) => {
  p.fake.script('indexless-calls', [
    {
      indexlessToolCalls: true,
      tool_calls: [
        { name: 'get_weather', arguments: { city: 'Paris' } },
        { name: 'get_time', arguments: { zone: 'CET' } },
      ],
    },
  ]);
  const { client } = await p.newClient();
  const parameters = { type: 'object', properties: {} };
  const tools = [
    { type: 'function' as const, name: 'get_weather', parameters, strict: false },
    { type: 'function' as const, name: 'get_time', parameters, strict: false },
  ];
  const { final } = await streamResponse(t, client, { model: MODEL, input: 'weather and time #script:indexless-calls', tools });
  t.is(final.status, 'completed');
  t.deepEqual(
    final.output.map((item: any) => ({ type: item.type, name: item.name, arguments: item.arguments, call_id: item.call_id })),
    [
      { type: 'function_call', name: 'get_weather', arguments: '{"city":"Paris"}', call_id: 'call_indexless-calls_0_0' },
      { type: 'function_call', name: 'get_time', arguments: '{"zone":"CET"}', call_id: 'call_indexless-calls_0_1' },
    ],
  );
});
