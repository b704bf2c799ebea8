import http from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import OpenAI from 'openai';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';
import { waitFor } from '../../helpers/wait.js';

// The gateway always asks the provider for usage (`stream_options.include_usage`), so the
// usage-only chunk that ends a stream is the gateway's, not the client's: a client that did not ask
// for usage must not get it, whatever shape the provider gives it. OpenAI sends `choices: []`; some
// providers leave `choices` out or send `null`, which a client reading `chunk.choices[0]` (as the
// SDKs' examples do) trips over. Either way the usage is still recorded from it.
const MODEL = 'shape-model';
const USAGE = { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 };
let h: LlmHarness;
let provider: { url: string; close(): Promise<void> };

/** The usage-only chunk as the provider shapes it: `choices` absent, null, or empty. */
type Shape = 'absent' | 'null' | 'empty';

/** A provider that streams a short answer and ends it with a usage-only chunk shaped by `#shape:<shape>` in the last user message. */
async function startProvider() {
  const server = http.createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/v1/models') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ object: 'list', data: [{ id: MODEL, object: 'model', created: 1700000000, owned_by: 'shape' }] }));
      return;
    }
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (text: string) => (raw += text));
    req.on('end', () => {
      const shape = (/#shape:(\w+)/.exec(raw)?.[1] ?? 'empty') as Shape;
      const base = { id: 'chatcmpl-shape', object: 'chat.completion.chunk', created: 1700000000, model: MODEL };
      const data = (chunk: object) => `data: ${JSON.stringify({ ...base, ...chunk })}\n\n`;
      const usageOnly = shape === 'absent' ? { usage: USAGE } : { choices: shape === 'null' ? null : [], usage: USAGE };
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(data({ choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] }));
      res.write(data({ choices: [{ index: 0, delta: { content: 'Hi there' }, finish_reason: null }] }));
      res.write(data({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }));
      res.end(`${data(usageOnly)}data: [DONE]\n\n`);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

test.before(async () => {
  provider = await startProvider();
  h = await startLlmHarness();
  const created = await h.call('POST', '/v1/admin/providers', { name: 'Shapes', vendor: 'fake', base_url: provider.url });
  if (created.status !== 201) throw new Error(`provider: ${created.status} ${JSON.stringify(created.body)}`);
});
test.after.always(async () => {
  await h?.close();
  await provider?.close();
});

/** The data of each event of a streamed answer, parsed (`[DONE]` as is). */
function events(text: string): unknown[] {
  return text
    .split('\n\n')
    .filter((event) => event.startsWith('data: '))
    .map((event) => (event === 'data: [DONE]' ? '[DONE]' : JSON.parse(event.slice(6))));
}

for (const shape of ['absent', 'null', 'empty'] as const) {
  test(`a usage-only chunk with choices ${shape} is kept from a client that did not ask for usage, and still recorded`, async (t) => {
    const requestId = `shape-${shape}-${Date.now().toString(36)}`;
    const res = await h.call('POST', '/v1/chat/completions', { model: MODEL, stream: true, messages: [{ role: 'user', content: `hi #shape:${shape}` }] }, h.user, { 'x-request-id': requestId });
    t.is(res.status, 200);
    const got = events(res.body as string);
    t.is(got.at(-1), '[DONE]');
    const chunks = got.slice(0, -1) as Array<{ choices?: unknown; usage?: unknown }>;
    t.is(chunks.length, 3, 'the answer\'s three chunks, without the usage-only one');
    for (const chunk of chunks) {
      t.true(Array.isArray(chunk.choices) && chunk.choices.length === 1, JSON.stringify(chunk));
      t.is(chunk.usage, undefined);
    }
    const row = await waitFor(() => h.service.runtime.db.knex('llm_usage').where({ request_id: requestId }).first(), 10_000, 'the usage row');
    t.like(row, { status: 200, outcome: 'ok', prompt_tokens: USAGE.prompt_tokens, completion_tokens: USAGE.completion_tokens, usage_estimated: false });
  });

  test(`a usage-only chunk with choices ${shape} reaches a client that asked for usage with choices [], as OpenAI sends it; the SDK's stream helper reads it`, async (t) => {
    const res = await h.call('POST', '/v1/chat/completions', { model: MODEL, stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: `hi #shape:${shape}` }] }, h.user);
    t.is(res.status, 200);
    const got = events(res.body as string);
    t.is(got.length, 5);
    const usageChunk = got[3] as { id?: unknown; choices?: unknown; usage?: unknown };
    t.deepEqual(usageChunk.usage, USAGE);
    t.deepEqual(usageChunk.choices, []);
    t.is(usageChunk.id, 'chatcmpl-shape');
    // The helper iterates every chunk's choices: absent or null, it threw "chunk.choices is not iterable".
    const client = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: 'x', maxRetries: 0, defaultHeaders: h.headers(h.user) });
    const final = await client.chat.completions.stream({ model: MODEL, stream_options: { include_usage: true }, messages: [{ role: 'user', content: `hi #shape:${shape}` }] }).finalChatCompletion();
    t.is(final.choices[0]!.message.content, 'Hi there');
    t.deepEqual(final.usage, USAGE);
  });
}
