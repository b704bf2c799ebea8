import { readdirSync, readFileSync } from 'node:fs';
import test from 'ava';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { waitFor } from '../helpers/wait.js';
import { startMcpPlatform, type McpPlatform } from '../mcp/helpers.js';

// The python_exec bound (MCP_MAX_CONCURRENT_PYTHON, 2 here: one run per user) with the bubblewrap
// driver, through the edge and the MCP SDK client. A run is known to be in flight once a process
// of its sandbox uid exists; it ends when its caller cancels it.
const UID_BASE = 63_000;
let p: McpPlatform;

test.before(async () => {
  p = await startMcpPlatform({ SANDBOX_UID_BASE: String(UID_BASE), MCP_MAX_CONCURRENT_PYTHON: '2' });
});
test.after.always(async () => {
  await p?.stop();
});

/** Sandbox uids in [base, base + 16) that have a process on this host. */
function sandboxUids(): Set<number> {
  const uids = new Set<number>();
  for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    try {
      const uid = Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]);
      if (uid >= UID_BASE && uid < UID_BASE + 16) uids.add(uid);
    } catch {
      // the process ended while we looked
    }
  }
  return uids;
}

const SLOW = 'import time\ntime.sleep(120)\nprint("slept")';
const slow = (client: Client, signal: AbortSignal) =>
  client.callTool({ name: 'python_exec', arguments: { code: SLOW, timeout_ms: 60_000 } }, undefined, { signal, timeout: 120_000 }).catch((error: Error) => error);
const quick = (client: Client) => client.callTool({ name: 'python_exec', arguments: { code: 'print(6*7)' } }) as Promise<any>;

test.serial('one user holds at most half the sandbox slots: their next run is "busy" while another user still runs; the slot comes back when the run is cancelled', async (t) => {
  const [a, b, c] = [await p.newUser(), await p.newUser(), await p.newUser()];
  const clientA = await p.client(a.key);
  const stopA = new AbortController();
  const heldA = slow(clientA, stopA.signal);
  await waitFor(() => sandboxUids().size === 1, 20_000, "A's run in its sandbox");

  const againA = await quick(clientA);
  t.true(againA.isError, JSON.stringify(againA));
  t.regex(againA.content[0].text, /you have 1 run in progress, the most one user may run at once; retry shortly/);

  const clientB = await p.client(b.key);
  const quickB = await quick(clientB);
  t.falsy(quickB.isError, JSON.stringify(quickB));
  t.is(quickB.structuredContent.stdout, '42\n');

  // A and B each hold one of the two slots: a third user is busy (the bound itself).
  const stopB = new AbortController();
  const heldB = slow(clientB, stopB.signal);
  await waitFor(() => sandboxUids().size === 2, 20_000, "B's run in its sandbox");
  const quickC = await quick(await p.client(c.key));
  t.true(quickC.isError, JSON.stringify(quickC));
  t.regex(quickC.content[0].text, /every sandbox slot is in use; retry shortly/);

  // Cancelling the runs kills their sandboxes and gives the slots (and A's share) back.
  stopA.abort(new Error('done holding'));
  stopB.abort(new Error('done holding'));
  t.true((await heldA) instanceof Error);
  t.true((await heldB) instanceof Error);
  await waitFor(() => sandboxUids().size === 0, 20_000, 'every sandbox process gone');
  const served = await waitFor(async () => {
    const result = await quick(clientA);
    return result.isError ? null : result;
  }, 20_000, "A's slot back");
  t.is(served.structuredContent.stdout, '42\n');
});
