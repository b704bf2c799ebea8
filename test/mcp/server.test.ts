import test from 'ava';
import { gzipSync } from 'node:zlib';
import { Ajv } from 'ajv';
import { startMcpPlatform, startSite, ARTICLE_HTML, type McpPlatform } from './helpers.js';

// The MCP server through the embedded edge (deck/kong.yaml), with the official SDK client and as
// plain JSON-RPC: the tool list, python_exec and scrape called for real, every JSON-RPC error.
let p: McpPlatform;
let site: Awaited<ReturnType<typeof startSite>>;
let key: string;

test.before(async () => {
  site = await startSite({
    '/article': { type: 'text/html; charset=utf-8', body: ARTICLE_HTML },
    '/data.json': { type: 'application/json', body: '{"otters": 3}' },
  });
  p = await startMcpPlatform({ EGRESS_ALLOW_HOSTS: '127.0.0.1' });
  ({ key } = await p.newUser());
});
test.after.always(async () => {
  await p?.stop();
  await site?.close();
});

const TOOLS = ['google_search', 'scrape', 'file_search_index', 'file_search_query', 'python_exec'];

test('the SDK client lists exactly the five tools, each with a valid JSON schema for input and output', async (t) => {
  const client = await p.client(key);
  t.is(client.getServerVersion()?.name, 'mcp-tools');
  const { tools } = await client.listTools();
  t.deepEqual(tools.map((tool) => tool.name), TOOLS);
  const ajv = new Ajv({ strict: false });
  for (const tool of tools) {
    t.is(tool.inputSchema.type, 'object', tool.name);
    t.true(ajv.validateSchema(tool.inputSchema) as boolean, `${tool.name} input schema`);
    t.true(ajv.validateSchema(tool.outputSchema!) as boolean, `${tool.name} output schema`);
    t.true(tool.description!.length > 80, `${tool.name} has a description a model can act on`);
  }
  const python = tools.find((tool) => tool.name === 'python_exec')!;
  t.deepEqual(python.inputSchema.required, ['code']);
});

test('python_exec prints 42 for print(6*7), with structured output and a text rendering', async (t) => {
  const client = await p.client(key);
  const result: any = await client.callTool({ name: 'python_exec', arguments: { code: 'print(6*7)' } });
  t.falsy(result.isError);
  t.is(result.structuredContent.stdout, '42\n');
  t.is(result.structuredContent.exit_code, 0);
  t.false(result.structuredContent.timed_out);
  t.false(result.structuredContent.truncated);
  t.true(result.content[0].text.startsWith('42\n'));
});

test('python_exec passes stdin and reports a non-zero exit code with stderr', async (t) => {
  const client = await p.client(key);
  const echoed: any = await client.callTool({ name: 'python_exec', arguments: { code: 'import sys; print(sys.stdin.read().upper())', stdin: 'otter' } });
  t.falsy(echoed.isError, JSON.stringify(echoed.content));
  t.is(echoed.structuredContent?.stdout, 'OTTER\n');
  const failed: any = await client.callTool({ name: 'python_exec', arguments: { code: 'raise SystemExit("bad")' } });
  // A program's failure is a result (exit code and stderr), not a tool error.
  t.falsy(failed.isError, JSON.stringify(failed.content));
  t.is(failed.structuredContent?.exit_code, 1);
  t.regex(failed.structuredContent.stderr, /bad/);
});

test('scrape reads the article of a local page as Markdown and as text, without scripts or navigation', async (t) => {
  const client = await p.client(key);
  const md: any = await client.callTool({ name: 'scrape', arguments: { url: site.url('/article') } });
  t.falsy(md.isError, JSON.stringify(md.content));
  const page = md.structuredContent;
  t.is(page.url, site.url('/article'));
  t.is(page.final_url, site.url('/article'));
  t.is(page.title, 'Otters of the Pacific');
  t.regex(page.content, /hold hands while they sleep/);
  t.regex(page.content, /## Diet/);
  t.regex(page.content, /-\s+Sea urchins/);
  t.true(page.content.includes(`(${site.url('/more')})`), 'relative links are made absolute');
  t.false(page.content.includes('never in the output'));
  t.false(page.truncated);

  const text: any = await client.callTool({ name: 'scrape', arguments: { url: site.url('/article'), format: 'text', max_chars: 120 } });
  t.is(text.structuredContent.content.length, 120);
  t.true(text.structuredContent.truncated);
  t.false(text.structuredContent.content.includes('##'));

  const json: any = await client.callTool({ name: 'scrape', arguments: { url: site.url('/data.json') } });
  t.is(json.structuredContent.content, '{"otters": 3}');
});

test('the plain JSON-RPC form (Accept: application/json) gets plain JSON answers', async (t) => {
  const list = await p.rpc(key, { jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} });
  t.is(list.status, 200);
  t.regex(list.headers.get('content-type') ?? '', /^application\/json/);
  t.deepEqual(list.json.result.tools.map((tool: any) => tool.name), TOOLS);

  const call = await p.rpc(key, { jsonrpc: '2.0', id: 'a', method: 'tools/call', params: { name: 'python_exec', arguments: { code: 'print(sum(range(10)))' } } });
  t.is(call.status, 200);
  t.is(call.json.id, 'a');
  t.is(call.json.result.structuredContent.stdout, '45\n');

  // Without any Accept header, and through the /llm prefix.
  const bare = await fetch(`${p.url}/llm/v1/mcp`, {
    method: 'POST',
    headers: { 'x-api-key': key, 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/list' }),
  });
  t.is(bare.status, 200);
  t.is(((await bare.json()) as any).result.tools.length, 5);
});

test('a JSON-RPC batch gets one answer per request, in one JSON array, also a batch of one', async (t) => {
  const batch = await p.rpc(key, [
    { jsonrpc: '2.0', id: 1, method: 'tools/list' },
    { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'python_exec', arguments: { code: 'print(2+2)' } } },
    { jsonrpc: '2.0', id: 3, method: 'no/such' },
  ]);
  t.is(batch.status, 200);
  const byId = new Map((batch.json as any[]).map((answer) => [answer.id, answer]));
  t.is(byId.get(1).result.tools.length, 5);
  t.is(byId.get(2).result.structuredContent.stdout, '4\n');
  t.is(byId.get(3).error.code, -32601);
  // One bad member does not sink the batch: it gets its own error, the rest are served.
  const mixed = await p.rpc(key, [{ jsonrpc: '2.0', id: 5, method: 'ping' }, 1, { jsonrpc: '2.0', id: 6, method: 'tools/list', params: { cursor: 7 } }]);
  t.is(mixed.status, 200);
  t.deepEqual(
    (mixed.json as any[]).map((answer) => [answer.id, answer.error?.code ?? 'ok']).sort((a, b) => String(a[0]).localeCompare(String(b[0]))),
    [[5, 'ok'], [6, -32602], [null, -32600]].sort((a, b) => String(a[0]).localeCompare(String(b[0]))),
  );
  const badWithNotification = await p.rpc(key, [{ jsonrpc: '2.0', method: 'notifications/initialized' }, { jsonrpc: '2.0', id: 8 }]);
  t.is(badWithNotification.status, 200);
  t.deepEqual((badWithNotification.json as any[]).map((answer) => answer.error.code), [-32600]);
  // A refusal of the whole request by the transport stays one error object, batch or not.
  const refused = await p.rpc(key, [{ jsonrpc: '2.0', id: 9, method: 'ping' }], { 'mcp-protocol-version': '1999-01-01' });
  t.is(refused.status, 400);
  t.false(Array.isArray(refused.json));
  const ofOne = await p.rpc(key, [{ jsonrpc: '2.0', id: 4, method: 'tools/list' }]);
  t.is(ofOne.status, 200);
  t.true(Array.isArray(ofOne.json), 'a batch of one is answered with an array of one');
  t.is((ofOne.json as any[])[0].id, 4);
  t.is((ofOne.json as any[])[0].result.tools.length, 5);
});

test('JSON-RPC errors: parse error, method not found, invalid params naming the field, unknown tool', async (t) => {
  const malformed = await p.rpc(key, '{"jsonrpc": "2.0", "id": 1, "method": ');
  t.is(malformed.status, 400);
  t.is(malformed.json.jsonrpc, '2.0');
  t.is(malformed.json.error.code, -32700);
  t.is(malformed.json.id, null);
  // Bytes that are not UTF-8 are a parse error too, not text with U+FFFD where the bytes were.
  const notUtf8 = await p.rpc(key, Buffer.concat([Buffer.from('{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}}')]));
  t.is(notUtf8.status, 400);
  t.is(notUtf8.json.error.code, -32700);
  t.regex(notUtf8.json.error.message, /not valid UTF-8/);

  // JSON that is not a JSON-RPC message is an invalid request (-32700 is for text that is not JSON).
  for (const body of [{ hello: 'world' }, { jsonrpc: '2.0', id: 2, method: 1 }, { jsonrpc: '1.0', id: 2, method: 'ping' }, null, []]) {
    const notRpc = await p.rpc(key, JSON.stringify(body));
    t.is(notRpc.status, 400, JSON.stringify(body));
    t.is(notRpc.json.error.code, -32600, JSON.stringify(body));
    t.false(Array.isArray(notRpc.json), 'one error object, even for an empty batch');
  }
  const wrongVersion = await p.rpc(key, { jsonrpc: '1.0', id: 2, method: 'ping' });
  t.is(wrongVersion.json.id, 2, 'a usable id is echoed');

  // Params that do not fit a method we serve: invalid params, not an internal error.
  const badInit = await p.rpc(key, { jsonrpc: '2.0', id: 'i', method: 'initialize', params: { protocolVersion: 5, capabilities: {}, clientInfo: { name: 'x', version: '1' } } });
  t.is(badInit.status, 200);
  t.like(badInit.json, { id: 'i', error: { code: -32602, data: { param: 'params.protocolVersion' } } });
  const badCursor = await p.rpc(key, { jsonrpc: '2.0', id: 'c', method: 'tools/list', params: { cursor: 5 } });
  t.is(badCursor.json.error.code, -32602);
  const unknownCursor = await p.rpc(key, { jsonrpc: '2.0', id: 'c2', method: 'tools/list', params: { cursor: 'garbage' } });
  t.is(unknownCursor.json.error.code, -32602, 'a cursor tools/list never issued is refused, not ignored');
  t.regex(unknownCursor.json.error.message, /cursor/);

  const unknownMethod = await p.rpc(key, { jsonrpc: '2.0', id: 3, method: 'tools/destroy', params: {} });
  t.is(unknownMethod.json.error.code, -32601);
  t.is(unknownMethod.json.id, 3);

  const badArgs = await p.rpc(key, { jsonrpc: '2.0', id: 4, method: 'tools/call', params: { name: 'python_exec', arguments: { code: 'print(1)', timeout_ms: 999999 } } });
  t.is(badArgs.json.error.code, -32602);
  t.regex(badArgs.json.error.message, /arguments\.timeout_ms/);
  t.is(badArgs.json.error.data.param, 'arguments.timeout_ms');

  const missing = await p.rpc(key, { jsonrpc: '2.0', id: 5, method: 'tools/call', params: { name: 'scrape', arguments: {} } });
  t.is(missing.json.error.code, -32602);
  t.regex(missing.json.error.message, /arguments\.url/);

  const extra = await p.rpc(key, { jsonrpc: '2.0', id: 6, method: 'tools/call', params: { name: 'scrape', arguments: { url: site.url('/article'), colour: 'red' } } });
  t.is(extra.json.error.code, -32602);

  const unknownTool = await p.rpc(key, { jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'rm_rf', arguments: {} } });
  t.is(unknownTool.json.error.code, -32602);
  t.regex(unknownTool.json.error.message, /Unknown tool/);

  const wrongType = await p.rpc(key, { jsonrpc: '2.0', id: 8, method: 'tools/call', params: { name: 'python_exec', arguments: { code: 'x' } } }, { 'content-type': 'text/plain' });
  t.is(wrongType.status, 415);
  t.is(wrongType.json.error.code, -32000);
  const compressed = await p.rpc(key, gzipSync(JSON.stringify({ jsonrpc: '2.0', id: 8, method: 'tools/list' })), { 'content-encoding': 'gzip' });
  t.is(compressed.status, 415);
  t.is(compressed.json.error.code, -32000);
  t.regex(compressed.json.error.message, /Content-Encoding/);

  const deep = await p.rpc(key, `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"file_search_index","arguments":{"text":"x","metadata":{"a":${'['.repeat(500)}${']'.repeat(500)}}}}}`);
  t.is(deep.status, 400);
  t.is(deep.json.error.code, -32600);
  t.regex(deep.json.error.message, /nested deeper than/);

  const noName = await p.rpc(key, { jsonrpc: '2.0', id: 10, method: 'tools/call', params: { arguments: {} } });
  t.is(noName.json.error.code, -32602);
  const listArgs = await p.rpc(key, { jsonrpc: '2.0', id: 11, method: 'tools/call', params: { name: 'python_exec', arguments: ['print(1)'] } });
  t.is(listArgs.json.error.code, -32602);

  const get = await fetch(`${p.url}/v1/mcp`, { headers: { 'x-api-key': key, accept: 'text/event-stream' } });
  t.is(get.status, 405);
  t.is(((await get.json()) as any).error.code, -32000);
});

test('the SDK client (protocol 2025-11-25) gets a bad argument as an error result naming the field, as it gets a failing tool', async (t) => {
  const client = await p.client(key);
  t.is(client.getServerVersion()?.name, 'mcp-tools');
  const invalid: any = await client.callTool({ name: 'scrape', arguments: { url: 'not a url' } });
  t.true(invalid.isError, 'the model reads the message and can correct the call');
  t.regex(invalid.content[0].text, /arguments\.url/);
  // Before 2025-11-25 the same call is a JSON-RPC invalid-params error.
  const older = await p.rpc(key, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'scrape', arguments: { url: 'not a url' } } }, { 'mcp-protocol-version': '2025-06-18' });
  t.is(older.json.error.code, -32602);
  t.is(older.json.error.data.param, 'arguments.url');
  const unknownTool: any = await t.throwsAsync(client.callTool({ name: 'rm_rf', arguments: {} }));
  t.regex(unknownTool.message, /-32602/, 'an unknown tool stays a protocol error in every revision');
  const failed: any = await client.callTool({ name: 'scrape', arguments: { url: site.url('/missing') } });
  t.true(failed.isError);
  t.regex(failed.content[0].text, /HTTP 404/);
});

test('google_search without a configured backend fails with a message naming both settings', async (t) => {
  const client = await p.client(key);
  const result: any = await client.callTool({ name: 'google_search', arguments: { q: 'otters' } });
  t.true(result.isError);
  t.regex(result.content[0].text, /SERPER_API_KEY/);
  t.regex(result.content[0].text, /SEARXNG_URL/);
});

test('without a credential the edge answers 401 and the request never reaches mcp-tools', async (t) => {
  const res = await fetch(`${p.url}/v1/mcp`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
  });
  t.is(res.status, 401);
  const bad = await p.rpc('sk_' + 'x'.repeat(32), { jsonrpc: '2.0', id: 1, method: 'tools/list' });
  t.is(bad.status, 401);
});

test('metrics count calls and errors per tool', async (t) => {
  const client = await p.client(key);
  await client.callTool({ name: 'python_exec', arguments: { code: 'print(1)' } });
  await client.callTool({ name: 'google_search', arguments: { q: 'no backend here' } });
  const metrics = await (await fetch(`${p.serviceUrl('mcp-tools')}/metrics`)).text();
  t.regex(metrics, /mcp_tool_calls_total\{[^}]*tool="python_exec"[^}]*outcome="ok"[^}]*\} [1-9]/);
  t.regex(metrics, /mcp_tool_call_duration_seconds_bucket\{[^}]*tool="python_exec"/);
  t.regex(metrics, /mcp_tool_errors_total\{[^}]*tool="google_search"[^}]*\} [1-9]/);
});
