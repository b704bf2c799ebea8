import test from 'ava';
import sharp from 'sharp';
import OpenAI from 'openai';
import { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

/**
 * The end-to-end core: one pass over every public service through an edge, with the clients an
 * API user has (the official `openai` SDK, the MCP SDK client, plain HTTP for media). The cases
 * take their target as an argument, so the same bodies run against the single-process platform
 * (./core.test.ts) and through each edge of the multi-process cluster
 * (test/reliability/cluster.test.ts).
 */
export interface E2eTarget {
  /** The edge's base URL, e.g. http://127.0.0.1:40123. */
  url: string;
  /** A chat model served by a fake upstream (test/fakes/openai-upstream.ts) registered on the platform. */
  model: string;
  /** That upstream's name: its default answer is `Hello from <name> w1 w2 w3 w4`. */
  upstreamName: string;
  /** An API key of a new ordinary user, on a tier whose limits these cases stay under. */
  newKey(): Promise<string>;
}

/**
 * Registers the core cases (serial: a target is one platform) titled `<label>: …`. `target` is
 * read when a case starts, after the file's `before` hook has started the platform.
 */
export function registerE2eCore(label: string, target: () => E2eTarget): void {
  const client = async () => {
    const { url, newKey } = target();
    return new OpenAI({ baseURL: `${url}/v1`, apiKey: await newKey(), maxRetries: 0 });
  };
  const answer = () => `Hello from ${target().upstreamName} w1 w2 w3 w4`;

  test.serial(`${label}: models and chat completions (plain and streamed) with the openai SDK`, async (t) => {
    const { model } = target();
    const sdk = await client();
    const ids: string[] = [];
    for await (const m of sdk.models.list()) ids.push(m.id);
    t.true(ids.includes(model), `${model} listed`);
    t.is((await sdk.models.retrieve(model)).id, model);

    const plain = await sdk.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }] });
    t.is(plain.object, 'chat.completion');
    t.is(plain.choices[0]!.message.content, answer());

    const stream = await sdk.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }], stream: true, stream_options: { include_usage: true } });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    t.is(chunks.map((c) => c.choices[0]?.delta.content ?? '').join(''), answer());
    t.truthy(chunks.at(-1)!.usage, 'the usage chunk ends the stream');
  });

  test.serial(`${label}: conversations and items, and a stored chat turn read back, with the openai SDK`, async (t) => {
    const { model } = target();
    const sdk = await client();
    const conversation = await sdk.conversations.create({ metadata: { topic: 'e2e' }, items: [{ type: 'message', role: 'user', content: 'Hello!' }] });
    t.regex(conversation.id, /^conv_/);
    t.deepEqual((await sdk.conversations.retrieve(conversation.id)).metadata, { topic: 'e2e' });
    t.deepEqual((await sdk.conversations.update(conversation.id, { metadata: { topic: 'changed' } })).metadata, { topic: 'changed' });

    const added = await sdk.conversations.items.create(conversation.id, {
      items: [{ type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Hi there', annotations: [] }] } as any],
    });
    t.is(added.data.length, 1);
    const retrieved = (await sdk.conversations.items.retrieve(added.data[0]!.id!, { conversation_id: conversation.id })) as any;
    t.is(retrieved.content[0].text, 'Hi there');

    // A chat turn stored into the conversation lands as two more items.
    const turn: any = await sdk.chat.completions.create({ model, messages: [{ role: 'user', content: 'remember this' }], store: true, conversation: conversation.id } as any);
    t.is(turn.conversation.id, conversation.id);
    const items: any[] = [];
    for await (const item of sdk.conversations.items.list(conversation.id, { order: 'asc' })) items.push(item);
    t.deepEqual(items.map((i) => i.role), ['user', 'assistant', 'user', 'assistant']);
    t.is(items[3].content[0].text, answer());

    const afterDelete = await sdk.conversations.items.delete(added.data[0]!.id!, { conversation_id: conversation.id });
    t.is(afterDelete.id, conversation.id);
    t.is((await sdk.conversations.items.list(conversation.id)).data.length, 3);
    t.deepEqual(await sdk.conversations.delete(conversation.id), { id: conversation.id, object: 'conversation.deleted', deleted: true });
    await t.throwsAsync(sdk.conversations.retrieve(conversation.id), { instanceOf: OpenAI.NotFoundError });
  });

  test.serial(`${label}: media upload, metadata, content and signed URL`, async (t) => {
    const { url, newKey } = target();
    const headers = { 'x-api-key': await newKey() };
    const png = await sharp({ create: { width: 30, height: 20, channels: 3, background: { r: 10, g: 120, b: 200 } } }).png().toBuffer();
    const res = await fetch(`${url}/v1/media/upload`, {
      method: 'POST',
      headers: { ...headers, 'content-type': 'application/json' },
      body: JSON.stringify({ source: { type: 'base64', data: png.toString('base64') }, filename: 'e2e.png' }),
    });
    const up: any = await res.json();
    t.is(res.status, 201, JSON.stringify(up));
    t.like(up, { object: 'media', mime_type: 'image/png', width: 30, height: 20, filename: 'e2e.png' });

    const got = await fetch(`${url}/v1/media/${up.id}`, { headers });
    t.is(got.status, 200);
    t.like(await got.json(), { id: up.id, bytes: up.bytes });
    const content = await fetch(`${url}/v1/media/${up.id}/content`, { headers });
    t.is(content.status, 200);
    t.is(content.headers.get('content-type'), 'image/png');
    const bytes = Buffer.from(await content.arrayBuffer());
    t.is(bytes.length, up.bytes);
    t.like(await sharp(bytes).metadata(), { width: 30, height: 20, format: 'png' });
    // The signed URL in the answer works without a credential.
    const signed = await fetch(up.url);
    t.is(signed.status, 200);
    t.deepEqual(Buffer.from(await signed.arrayBuffer()), bytes);
  });

  test.serial(`${label}: MCP tools/list and tools/call (index, then query) with the MCP SDK client`, async (t) => {
    const { url, newKey } = target();
    const mcp = new McpClient({ name: 'e2e-core', version: '1.0.0' });
    await mcp.connect(new StreamableHTTPClientTransport(new URL(`${url}/v1/mcp`), { requestInit: { headers: { 'x-api-key': await newKey() } } }));
    t.teardown(() => mcp.close());
    const names = (await mcp.listTools()).tools.map((tool) => tool.name);
    for (const name of ['google_search', 'scrape', 'file_search_index', 'file_search_query', 'python_exec']) t.true(names.includes(name), `${name} listed`);

    const indexed: any = await mcp.callTool({ name: 'file_search_index', arguments: { document_id: 'e2e-doc', text: 'The lighthouse keeper polishes the brass lens every evening.' } });
    t.falsy(indexed.isError, JSON.stringify(indexed.content));
    t.like(indexed.structuredContent, { document_id: 'e2e-doc', status: 'indexed' });
    const found: any = await mcp.callTool({ name: 'file_search_query', arguments: { query: 'lighthouse lens' } });
    t.falsy(found.isError, JSON.stringify(found.content));
    t.is(found.structuredContent.results[0]?.document_id, 'e2e-doc');
  });

  test.serial(`${label}: responses create, stream and retrieve with the openai SDK`, async (t) => {
    const { model } = target();
    const sdk = await client();
    // No tools: the fake upstream would otherwise call the first one offered.
    const response = await sdk.responses.create({ model, input: 'hello', tools: [] });
    t.is(response.status, 'completed');
    t.is(response.output_text, answer());
    const retrieved = await sdk.responses.retrieve(response.id);
    t.is(retrieved.id, response.id);
    t.is(retrieved.status, 'completed');

    const stream = await sdk.responses.create({ model, input: 'hello again', tools: [], stream: true });
    let text = '';
    let completed: OpenAI.Responses.Response | undefined;
    for await (const event of stream) {
      if (event.type === 'response.output_text.delta') text += event.delta;
      if (event.type === 'response.completed') completed = event.response;
    }
    t.is(text, answer());
    t.is(completed?.status, 'completed');
    t.is((await sdk.responses.retrieve(completed!.id)).output_text, answer());
  });
}
