import http from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { watched } from '../helpers/wait.js';
import { startMcpPlatform, type McpPlatform } from '../mcp/helpers.js';

// The python_exec bound (MCP_MAX_CONCURRENT_PYTHON, 2 here: one run per user) is shared fairly
// with the remote sandbox driver too: through the edge and the MCP SDK client, against a local
// stand-in for a SandboxFusion-style run_code service that holds the runs whose code says "hold"
// until the test lets them go.
let p: McpPlatform;
let sandbox: Awaited<ReturnType<typeof startHoldingSandbox>>;

async function startHoldingSandbox() {
  const arrived = watched();
  const held: Array<() => void> = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (chunk) => (body += chunk));
    req.on('end', () => {
      const { code } = JSON.parse(body) as { code: string };
      const answer = (stdout: string) =>
        res.writeHead(200, { 'content-type': 'application/json' }).end(
          JSON.stringify({ status: 'Success', message: '', run_result: { status: 'Finished', execution_time: 0.01, return_code: 0, stdout, stderr: '' } }),
        );
      if (!code.includes('hold')) return answer('42\n');
      held.push(() => answer('held\n'));
      arrived.set(arrived.get() + 1);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`,
    arrived,
    releaseAll: () => held.splice(0).forEach((answer) => answer()),
    close: () => {
      server.closeAllConnections();
      server.close();
    },
  };
}

test.before(async () => {
  sandbox = await startHoldingSandbox();
  p = await startMcpPlatform({ SANDBOX_URL: sandbox.url, MCP_MAX_CONCURRENT_PYTHON: '2' });
});
test.after.always(async () => {
  sandbox?.releaseAll();
  await p?.stop();
  sandbox?.close();
});

const call = (client: Client, code: string) => client.callTool({ name: 'python_exec', arguments: { code } }) as Promise<any>;

test.serial('one user holds at most half the python_exec runs; the others stay free for other users, and past the bound everyone is "busy"', async (t) => {
  const [a, b, c] = [await p.newUser(), await p.newUser(), await p.newUser()];
  const clientA = await p.client(a.key);
  const first = call(clientA, 'hold()');
  await sandbox.arrived.reached(1);

  // A's second run is refused at once; before the fix it reached the sandbox and was held too.
  const second = call(clientA, 'hold()');
  const secondOutcome = await Promise.race([second, sandbox.arrived.reached(2).then(() => 'reached the sandbox')]);
  t.not(secondOutcome, 'reached the sandbox', "the user's second run took the other slot");
  t.true(secondOutcome.isError, JSON.stringify(secondOutcome));
  t.regex(secondOutcome.content[0].text, /you have 1 run in progress, the most one user may run at once; retry shortly/);

  // Another user still gets a run.
  const clientB = await p.client(b.key);
  const quickB = await call(clientB, 'print(6*7)');
  t.falsy(quickB.isError, JSON.stringify(quickB));
  t.is(quickB.structuredContent.stdout, '42\n');

  // With both slots held (A's and B's) a third user is busy: the bound itself still holds.
  const heldB = call(clientB, 'hold()');
  await sandbox.arrived.reached(2);
  const quickC = await call(await p.client(c.key), 'print(6*7)');
  t.true(quickC.isError, JSON.stringify(quickC));
  t.regex(quickC.content[0].text, /every sandbox slot is in use; retry shortly/);

  sandbox.releaseAll();
  const results = await Promise.all([first, heldB]);
  t.deepEqual(results.map((r) => r.structuredContent?.stdout), ['held\n', 'held\n']);
  // The runs gave their slots back: A runs again.
  const again = await call(clientA, 'print(6*7)');
  t.falsy(again.isError, JSON.stringify(again));
  t.is(again.structuredContent.stdout, '42\n');
});
