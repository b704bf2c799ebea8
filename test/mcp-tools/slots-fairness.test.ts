import http from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { waitFor } from '../helpers/wait.js';
import { startMcpPlatform, type McpPlatform } from '../mcp/helpers.js';

// The bound on tool calls in flight (MCP_MAX_CONCURRENT_CALLS, 2 here) is shared fairly: one user
// holds at most half of it, so a user with slow calls in flight cannot leave every other user
// "busy"; and a call's slot comes back when its client goes away or cancels it.
let p: McpPlatform;

/** A page that never finishes: headers, then a byte now and then until its reader goes away. */
async function startEndlessPage() {
  let arrived!: () => void;
  const requested = new Promise<void>((resolve) => (arrived = resolve));
  let closed!: () => void;
  const gone = new Promise<void>((resolve) => (closed = resolve));
  const server = http.createServer((_req, res) => {
    arrived();
    res.writeHead(200, { 'content-type': 'text/plain' });
    const timer = setInterval(() => res.write('x'), 200);
    res.on('close', () => {
      clearInterval(timer);
      closed();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/endless`,
    requested,
    gone,
    close: () => {
      server.closeAllConnections();
      server.close();
    },
  };
}

test.before(async () => {
  // SCRAPE_TIMEOUT_MS far past the test's own timeout: only the client's leaving ends a call here.
  p = await startMcpPlatform({ EGRESS_ALLOW_HOSTS: '127.0.0.1', SCRAPE_TIMEOUT_MS: '120000', MCP_MAX_CONCURRENT_CALLS: '2' });
});
test.after.always(async () => {
  await p?.stop();
});

const quick = (client: Client) => client.callTool({ name: 'python_exec', arguments: { code: 'print(6*7)' } }) as Promise<any>;

test.serial('one user with a call in flight cannot take the last slot from another user; the slot comes back when the client goes away', async (t) => {
  const page = await startEndlessPage();
  t.teardown(page.close);
  const a = await p.newUser();
  const b = await p.newUser();
  const holder = await p.client(a.key);
  const held = holder.callTool({ name: 'scrape', arguments: { url: page.url } }).catch((error: Error) => error);
  await page.requested;

  const again = await quick(await p.client(a.key));
  t.true(again.isError, JSON.stringify(again));
  t.regex(again.content[0].text, /the most one user may run at once; retry/);

  const other = await quick(await p.client(b.key));
  t.falsy(other.isError, JSON.stringify(other));
  t.is(other.structuredContent.stdout, '42\n');

  // The client leaves: the fetch stops and the user's slot is free again.
  await holder.close();
  t.true((await held) instanceof Error, 'the call ended with its client');
  await page.gone;
  const later = await p.client(a.key);
  const served = await waitFor(async () => {
    const result = await quick(later);
    return result.isError ? null : result;
  }, 20_000, 'a slot freed by the departed client');
  t.is(served.structuredContent.stdout, '42\n');
});

test.serial('a call the client cancels (notifications/cancelled, a request of its own) is stopped and gives its slot back; another user cannot cancel it', async (t) => {
  const page = await startEndlessPage();
  t.teardown(page.close);
  const a = await p.newUser();
  const b = await p.newUser();
  const client = await p.client(a.key);
  const controller = new AbortController();
  const call = client.callTool({ name: 'scrape', arguments: { url: page.url } }, undefined, { signal: controller.signal }).catch((error: Error) => error);
  await page.requested;
  t.true((await quick(client)).isError, 'the user holds their one slot');
  // Another user naming the same request ids cancels nothing of A's.
  for (const requestId of [0, 1, 2, 3]) {
    const cancel = await p.rpc(b.key, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId } });
    t.is(cancel.status, 202, cancel.text);
  }
  t.true((await quick(client)).isError, 'the call is still in flight');
  controller.abort(new Error('changed my mind'));
  t.true((await call) instanceof Error);
  await page.gone;
  const served = await waitFor(async () => {
    const result = await quick(client);
    return result.isError ? null : result;
  }, 20_000, 'a slot freed by the cancelled call');
  t.is(served.structuredContent.stdout, '42\n');
});
