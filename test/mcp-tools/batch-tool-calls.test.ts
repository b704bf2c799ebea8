import test from 'ava';
import { startMcpPlatform, type McpPlatform } from '../mcp/helpers.js';

// The edge's rate limits count HTTP requests, and a JSON-RPC batch is one request: a batch of many
// tools/call ran them all (up to the user's share of the concurrency bound, 32 by default) for one
// counted request, so a free-tier key (3 requests a minute) could run dozens of paid searches,
// embeddings or sandboxes a minute. A batch now runs one tools/call; the others are refused.
let p: McpPlatform;
let key: string;

test.before(async () => {
  p = await startMcpPlatform();
  ({ key } = await p.newUser());
});
test.after.always(async () => {
  await p?.stop();
});

const python = (id: number, code: string) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'python_exec', arguments: { code } } });

test('a batch runs one tools/call; each further one gets its own invalid-request error and does not run, and the other members are served', async (t) => {
  const answer = await p.rpc(key, [python(1, 'print("one")'), { jsonrpc: '2.0', id: 2, method: 'tools/list' }, python(3, 'print("three")'), python(4, 'print("four")')]);
  t.is(answer.status, 200, answer.text);
  const byId = new Map((answer.json as any[]).map((a) => [a.id, a]));
  t.is(byId.size, 4, answer.text);
  t.is(byId.get(1).result.structuredContent.stdout, 'one\n');
  t.is(byId.get(2).result.tools.length, 5);
  for (const id of [3, 4]) {
    t.like(byId.get(id), { jsonrpc: '2.0', id, error: { code: -32600 } });
    t.regex(byId.get(id).error.message, /at most one tools\/call/);
  }
  t.false(answer.text.includes('three\\n') || answer.text.includes('four\\n'), 'the refused calls did not run');
});
