import test from 'ava';
import { startService, type StartedService } from '../../services/kit/index.js';
import { mcpToolsService } from '../../services/mcp-tools/service.js';
import { edgeHeaders } from '../helpers/users.js';
import { waitFor } from '../helpers/wait.js';
import { startReceiver, type Receiver } from '../webhooks/helpers.js';
import { startMcpPlatform, type McpPlatform } from './helpers.js';

// Tool administration through the edge: disable and enable a tool, the tool vanishing from
// tools/list in this process and in a second mcp-tools process on the same database, and the
// mcp_tool.* events reaching a webhook receiver.
let p: McpPlatform;
let receiver: Receiver;
let second: StartedService;
let user: Awaited<ReturnType<McpPlatform['newUser']>>;
let admin: Awaited<ReturnType<McpPlatform['newUser']>>;

test.before(async () => {
  receiver = await startReceiver();
  p = await startMcpPlatform({ EGRESS_ALLOW_HOSTS: '127.0.0.1', MCP_TOOL_STATE_REFRESH_MS: '200' });
  // A second mcp-tools process sharing the database (as a second replica behind the edge would).
  second = await startService(mcpToolsService, p.platform.ctx);
  user = await p.newUser();
  admin = await p.newUser({ admin: true });
});
test.after.always(async () => {
  if (second) {
    await second.server.close(1000);
    await second.stop();
  }
  await p?.stop();
  await receiver?.close();
});

async function toolsOfSecond(): Promise<string[]> {
  const res = await fetch(`http://127.0.0.1:${second.server.port}/v1/mcp`, {
    method: 'POST',
    headers: { ...edgeHeaders(p.gatewaySecret, user.user), 'content-type': 'application/json', accept: 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
  });
  return ((await res.json()) as any).result.tools.map((tool: any) => tool.name);
}

test.serial('only administrators reach the tool administration', async (t) => {
  const asUser = await p.api(user.key, 'GET', '/v1/admin/mcp/tools');
  t.is(asUser.status, 403);
  t.is(asUser.json.error.type, 'permission_error');
  const patch = await p.api(user.key, 'PATCH', '/v1/admin/mcp/tools/scrape', { enabled: false });
  t.is(patch.status, 403);
  const list = await p.api(admin.key, 'GET', '/v1/admin/mcp/tools');
  t.is(list.status, 200);
  t.is(list.json.object, 'list');
  t.deepEqual(list.json.data.map((tool: any) => [tool.name, tool.enabled]), [
    ['google_search', true],
    ['scrape', true],
    ['file_search_index', true],
    ['file_search_query', true],
    ['python_exec', true],
  ]);
  t.like((await p.api(admin.key, 'GET', '/llm/v1/admin/mcp/tools/python_exec')).json, { name: 'python_exec', available: true, unavailable_reason: null });
  // No search backend is configured here: the tool stays listed (and switchable), and administrators see why it cannot work.
  const search = (await p.api(admin.key, 'GET', '/v1/admin/mcp/tools/google_search')).json;
  t.false(search.available);
  t.regex(search.unavailable_reason, /SERPER_API_KEY.*SEARXNG_URL/);
});

test.serial('bad administration requests get clear 4xx answers naming the field', async (t) => {
  const unknown = await p.api(admin.key, 'PATCH', '/v1/admin/mcp/tools/rm_rf', { enabled: false });
  t.is(unknown.status, 404);
  t.is(unknown.json.error.param, 'name');
  const noFlag = await p.api(admin.key, 'PATCH', '/v1/admin/mcp/tools/scrape', { reason: 'x' });
  t.is(noFlag.status, 400);
  t.is(noFlag.json.error.param, 'enabled');
  const wrongType = await p.api(admin.key, 'PATCH', '/v1/admin/mcp/tools/scrape', { enabled: 'no' });
  t.is(wrongType.status, 400);
  t.is(wrongType.json.error.param, 'enabled');
});

test.serial('disable then enable: the tool vanishes everywhere and comes back; the events reach a webhook', async (t) => {
  const hook = await p.api(admin.key, 'POST', '/v1/admin/webhooks', { url: receiver.url('/mcp'), events: ['mcp_tool.*'] });
  t.is(hook.status, 201, JSON.stringify(hook.json));
  const client = await p.client(user.key);

  const disabled = await p.api(admin.key, 'PATCH', '/v1/admin/mcp/tools/python_exec', { enabled: false, reason: 'maintenance' });
  t.is(disabled.status, 200);
  t.like(disabled.json, { name: 'python_exec', enabled: false, reason: 'maintenance', updated_by: admin.user.id });

  // The process that handled the PATCH at once; the other one within its refresh interval.
  t.false((await client.listTools()).tools.some((tool) => tool.name === 'python_exec'));
  await waitFor(async () => !(await toolsOfSecond()).includes('python_exec'), 10_000, 'python_exec gone from the second process');
  const refused: any = await client.callTool({ name: 'python_exec', arguments: { code: 'print(1)' } });
  t.true(refused.isError);
  t.regex(refused.content[0].text, /disabled by an administrator/);

  // Disabling again changes nothing and emits nothing.
  t.is((await p.api(admin.key, 'PATCH', '/v1/admin/mcp/tools/python_exec', { enabled: false })).status, 200);

  const enabled = await p.api(admin.key, 'PATCH', '/v1/admin/mcp/tools/python_exec', { enabled: true });
  t.like(enabled.json, { enabled: true, reason: null });
  t.true((await client.listTools()).tools.some((tool) => tool.name === 'python_exec'));
  await waitFor(async () => (await toolsOfSecond()).includes('python_exec'), 10_000, 'python_exec back in the second process');
  const back: any = await client.callTool({ name: 'python_exec', arguments: { code: 'print(6*7)' } });
  t.is(back.structuredContent.stdout, '42\n');

  const received = await receiver.until((all) => all.filter((r) => r.path === '/mcp').length >= 2, 20_000, 'two mcp_tool events');
  const events = received.filter((r) => r.path === '/mcp').map((r) => r.json);
  t.deepEqual(events.map((e) => e.type), ['mcp_tool.disabled', 'mcp_tool.enabled']);
  const [off, on] = events;
  t.regex(off.id, /^evt_/);
  t.is(off.webhook_id, hook.json.id);
  t.is(off.data.tool_id, 'python_exec');
  t.is(off.data.tool_name, 'python_exec');
  t.is(off.data.disabled_by, admin.user.id);
  t.is(off.data.reason, 'maintenance');
  t.true(Number.isFinite(Date.parse(off.data.disabled_at)));
  t.like(on.data, { tool_id: 'python_exec', tool_name: 'python_exec', enabled_by: admin.user.id });
  t.true(Number.isFinite(Date.parse(on.data.enabled_at)));
  t.is(received.filter((r) => r.path === '/mcp').length, 2, 'the no-op PATCH emitted no event');
});
