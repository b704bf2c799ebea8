import test from 'ava';
import { ManualClock, type Principal } from '../../services/kit/index.js';
import { createToolsPort } from '../../services/response-api/responses/ports.js';
import { startFaultProxyFor, type UrlFaultProxy } from '../helpers/fault-proxy.js';
import { startMcpPlatform, type McpPlatform } from '../mcp/helpers.js';

// response-api's client of mcp-tools, against the real mcp-tools behind a fault proxy: the tool
// list is reused for RESPONSES_TOOLS_CACHE_MS by the clock, across sessions; a session reaches
// mcp-tools only when it first needs it (a cached list needs no connection), and a connection
// that failed is tried again by the next call.
let p: McpPlatform;
let proxy: UrlFaultProxy;
let principal: Principal;
let admin: string;

test.before(async () => {
  p = await startMcpPlatform();
  proxy = await startFaultProxyFor(p.serviceUrl('mcp-tools'), 80);
  const { user } = await p.newUser();
  admin = (await p.newUser({ admin: true })).key;
  principal = { userId: user.id, subject: user.id, email: user.email, username: user.username, authMethod: 'apikey', isAdmin: false, isGuest: false };
});
test.after.always(async () => {
  await proxy?.close();
  await p?.stop();
});

const names = (tools: Array<{ name: string }>) => tools.map((tool) => tool.name);
const ALL = ['google_search', 'scrape', 'file_search_index', 'file_search_query', 'python_exec'];
const switchTool = async (name: string, enabled: boolean) => {
  const res = await p.api(admin, 'PATCH', `/v1/admin/mcp/tools/${name}`, { enabled });
  if (res.status !== 200) throw new Error(`switch ${name}: ${res.status}`);
};

test.serial('the list is reused across sessions until the cache time has passed, without reaching mcp-tools', async (t) => {
  const clock = new ManualClock(1_000_000);
  const port = createToolsPort({ baseUrl: () => proxy.url('http'), gatewayToken: p.gatewaySecret, clock, listCacheMs: 30_000 });
  const signal = new AbortController().signal;
  const first = await port.open(principal, signal);
  t.deepEqual(names(await first.list()), ALL);
  await first.close();

  await switchTool('scrape', false);
  try {
    proxy.cut();
    const cached = await port.open(principal, signal);
    clock.advance(29_999);
    t.deepEqual(names(await cached.list()), ALL, 'the cached list, with mcp-tools out of reach');
    await t.notThrowsAsync(cached.close(), 'a session that never connected closes');

    clock.advance(1);
    const expired = await port.open(principal, signal);
    await t.throwsAsync(expired.list(), undefined, 'past the cache time the list is read again');
    proxy.resume();
    t.deepEqual(names(await expired.list()), ALL.filter((name) => name !== 'scrape'), 'the administrator’s switch is seen');
    await expired.close();
  } finally {
    proxy.resume();
    await switchTool('scrape', true);
  }
});

test.serial('a session connects at its first tool call, and a failed connection is tried again', async (t) => {
  const clock = new ManualClock(1_000_000);
  const port = createToolsPort({ baseUrl: () => proxy.url('http'), gatewayToken: p.gatewaySecret, clock, listCacheMs: 30_000 });
  const signal = new AbortController().signal;
  const warm = await port.open(principal, signal);
  await warm.list();
  await warm.close();

  const session = await port.open(principal, signal);
  t.true(names(await session.list()).includes('file_search_query'));
  const query = { query: 'otters', top_k: 1 };
  proxy.cut();
  await t.throwsAsync(session.call('file_search_query', query, { signal, timeoutMs: 10_000 }), undefined, 'mcp-tools out of reach at the first call');
  proxy.resume();
  const answer = await session.call('file_search_query', query, { signal, timeoutMs: 10_000 });
  t.false(answer.isError, answer.output);
  const again = await session.call('file_search_query', query, { signal, timeoutMs: 10_000 });
  t.false(again.isError, 'the connected session serves later calls');
  await session.close();
});

test.serial('with a cache time of 0 the list is read for every session', async (t) => {
  const port = createToolsPort({ baseUrl: () => proxy.url('http'), gatewayToken: p.gatewaySecret, clock: new ManualClock(), listCacheMs: 0 });
  const signal = new AbortController().signal;
  const first = await port.open(principal, signal);
  t.deepEqual(names(await first.list()), ALL);
  await first.close();
  try {
    proxy.cut();
    const second = await port.open(principal, signal);
    await t.throwsAsync(second.list());
    await second.close();
  } finally {
    proxy.resume();
  }
});
