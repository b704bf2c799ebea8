import test from 'ava';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { startLlmHarness, type LlmHarness } from '../../fakes/llm-harness.js';

// A provider's answer may hold what no database stores as text: a NUL, an unpaired UTF-16
// surrogate. With `store: true` the exchange is still stored (each such character as U+FFFD) and
// the client answered 200 / `[DONE]`, never a 500 after the provider was paid, which the SDK would
// retry (and so pay twice more). The client gets the provider's text unchanged.
let h: LlmHarness;
let upstream: http.Server;
let text = '';

test.before(async () => {
  upstream = http.createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    if (req.method === 'GET') {
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ object: 'list', data: [{ id: 'odd-text', object: 'model', created: 1, owned_by: 'odd' }] }));
    }
    const body = JSON.parse(Buffer.concat(chunks).toString());
    const usage = { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 };
    const call = { id: 'call_\u0000', type: 'function', function: { name: 'f\ud800', arguments: '{"a":"\u0000"}' } };
    if (!body.stream) {
      res.writeHead(200, { 'content-type': 'application/json' });
      const message = { role: 'assistant', content: text, ...(text === 'tools' ? { content: null, tool_calls: [call] } : {}) };
      return res.end(JSON.stringify({ id: 'c1', object: 'chat.completion', created: 1, model: body.model, choices: [{ index: 0, message, finish_reason: 'stop' }], usage }));
    }
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    const chunk = (choices: unknown[], extra: object = {}) => `data: ${JSON.stringify({ id: 'c1', object: 'chat.completion.chunk', created: 1, model: body.model, choices, ...extra })}\n\n`;
    res.write(chunk([{ index: 0, delta: { role: 'assistant', content: text }, finish_reason: null }]));
    res.write(chunk([{ index: 0, delta: {}, finish_reason: 'stop' }]));
    res.write(chunk([], { usage }));
    res.end('data: [DONE]\n\n');
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  h = await startLlmHarness();
  const reg = await h.call('POST', '/v1/admin/providers', { name: 'OddText', vendor: 'odd', base_url: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/v1` });
  if (reg.status !== 201 && reg.status !== 200) throw new Error(`provider not registered: ${reg.status}`);
});
test.after.always(async () => {
  await h?.close();
  upstream?.closeAllConnections();
  await new Promise((resolve) => upstream?.close(resolve));
});

const storedItems = async (conversationId: string) =>
  (await h.call('GET', `/v1/conversations/${conversationId}/items?order=asc`, undefined, h.user)).body.data as Array<Record<string, any>>;

for (const [label, raw, stored] of [
  ['a NUL', 'before\u0000after', 'before\ufffdafter'],
  ['an unpaired surrogate', 'a\ud800b', 'a\ufffdb'],
] as const) {
  test.serial(`a JSON answer holding ${label} is answered 200 and stored with U+FFFD in its place`, async (t) => {
    text = raw;
    const res = await h.call('POST', '/v1/chat/completions', { model: 'odd-text', messages: [{ role: 'user', content: 'hi' }], store: true }, h.user);
    t.is(res.status, 200, JSON.stringify(res.body));
    const items = await storedItems(res.body.conversation.id);
    t.deepEqual(items.map((item) => item.role), ['user', 'assistant']);
    t.is(items[1]!.content[0].text, stored);
  });

  test.serial(`a streamed answer holding ${label} ends with [DONE] and is stored with U+FFFD in its place`, async (t) => {
    text = raw;
    const res = await h.call('POST', '/v1/chat/completions', { model: 'odd-text', messages: [{ role: 'user', content: 'hi' }], store: true, stream: true }, h.user);
    t.is(res.status, 200);
    const events = String(res.body);
    t.true(events.trimEnd().endsWith('data: [DONE]'), events.slice(-300));
    t.false(events.includes('"error"'), events.slice(-300));
    const conversationId = /"conversation":\{"id":"([^"]+)"/.exec(events)?.[1];
    t.truthy(conversationId, events.slice(0, 300));
    const items = await storedItems(conversationId!);
    t.is(items.at(-1)!.content[0].text, stored);
  });
}

test.serial('tool calls whose id, name or arguments hold such characters are stored too', async (t) => {
  text = 'tools';
  const res = await h.call('POST', '/v1/chat/completions', { model: 'odd-text', messages: [{ role: 'user', content: 'call' }], store: true }, h.user);
  t.is(res.status, 200, JSON.stringify(res.body));
  const call = (await storedItems(res.body.conversation.id)).find((item) => item.type === 'function_call');
  t.like(call, { call_id: 'call_\ufffd', name: 'f\ufffd', arguments: '{"a":"\ufffd"}' });
});
