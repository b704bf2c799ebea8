import test from 'ava';
import { startMcpPlatform, type McpPlatform } from '../mcp/helpers.js';

// Found by the audit of the MCP transport, through the edge as a client meets it:
// - a batch that reuses a request id lost the answer of one of them (the transport answers by id);
// - a client accepting no JSON answer (Accept: text/html, or only text/event-stream) was sent JSON
//   anyway instead of 406;
// - a tools/call asking to run as a task (no tool declares task support) was an internal error
//   (-32603) instead of the -32601 the tasks revision prescribes.
let p: McpPlatform;
let key: string;

test.before(async () => {
  p = await startMcpPlatform();
  ({ key } = await p.newUser());
});
test.after.always(async () => {
  await p?.stop();
});

test('a batch reusing a request id gets an answer for every request: the later one is refused, not lost', async (t) => {
  const call = (id: number | string, code: string) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'python_exec', arguments: { code } } });
  // (A batch runs one tools/call at most: the third request is a ping.)
  const answer = await p.rpc(key, [call(1, 'print("first")'), call(1, 'print("second")'), { jsonrpc: '2.0', id: '1', method: 'ping' }]);
  t.is(answer.status, 200, answer.text);
  t.is(answer.json.length, 3, answer.text);
  const answers = answer.json as any[];
  const first = answers.find((a) => a.result?.structuredContent?.stdout === 'first\n');
  const third = answers.find((a) => a.id === '1');
  const second = answers.find((a) => a.error);
  t.false(answers.some((a) => a.result?.structuredContent?.stdout === 'second\n'), 'the refused request did not run');
  t.is(first.id, 1);
  t.deepEqual(third.result, {}, 'a string id is another id than the number');
  t.like(second, { jsonrpc: '2.0', id: 1, error: { code: -32600 } });
  t.regex(second.error.message, /id is already used/);
});

test('a client that accepts no JSON answer gets 406; wildcards and no Accept are served', async (t) => {
  const ping = { jsonrpc: '2.0', id: 1, method: 'ping' };
  for (const accept of ['text/html', 'text/event-stream', 'application/json;q=0, text/event-stream', 'application/json;q=0, */*', 'text/html, application/*;q=0']) {
    const answer = await p.rpc(key, ping, { accept });
    t.is(answer.status, 406, `${accept}: ${answer.text}`);
    t.like(answer.json, { jsonrpc: '2.0', id: null, error: { code: -32000 } });
    t.regex(answer.json.error.message, /Not Acceptable/);
  }
  for (const accept of ['*/*', 'application/*', 'application/json, text/event-stream', 'text/html, application/json;q=0.1', 'application/json; charset=utf-8', 'APPLICATION/JSON', 'application/*;q=0, application/json', ' ']) {
    const answer = await p.rpc(key, ping, { accept });
    t.is(answer.status, 200, `${accept}: ${answer.text}`);
    t.deepEqual(answer.json.result, {});
  }
  const none = await fetch(`${p.url}/v1/mcp`, { method: 'POST', headers: { 'x-api-key': key, 'content-type': 'application/json' }, body: JSON.stringify(ping) });
  t.is(none.status, 200);
  // The SDK client sends both types and is served as before.
  const client = await p.client(key);
  t.deepEqual(await client.ping(), {});
});

test('a tools/call asking to run as a task is method not found (-32601), not an internal error; the same call without it runs', async (t) => {
  const call = (task?: unknown) => ({ jsonrpc: '2.0', id: 'c', method: 'tools/call', params: { name: 'python_exec', arguments: { code: 'print(6*7)' }, ...(task ? { task } : {}) } });
  const asTask = await p.rpc(key, call({ ttl: 60_000 }), { 'mcp-protocol-version': '2025-11-25' });
  t.is(asTask.status, 200, asTask.text);
  t.like(asTask.json, { jsonrpc: '2.0', id: 'c', error: { code: -32601, data: { param: 'params.task' } } });
  const plain = await p.rpc(key, call(), { 'mcp-protocol-version': '2025-11-25' });
  t.is(plain.json.result.structuredContent.stdout, '42\n', plain.text);
});
