import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { waitFor } from '../helpers/wait.js';
import { cleanEnv, entryArgs, freePort, startChild } from '../helpers/process.js';

// The edge keeps no state: started alone it opens no database and no bus. Both point at a port
// that records every connection attempt; the edge must answer without ever dialling them.
test('the edge started alone answers without opening a database or a bus', async (t) => {
  t.timeout(60_000);
  let dialled = 0;
  const trap = net.createServer((socket) => {
    dialled++;
    socket.destroy();
  });
  await new Promise<void>((resolve) => trap.listen(0, '127.0.0.1', resolve));
  const trapPort = (trap.address() as net.AddressInfo).port;
  const dataDir = mkdtempSync(join(tmpdir(), 'edge-alone-'));
  const port = await freePort();
  const child = startChild(process.execPath, entryArgs('services/gateway/main.ts'), {
    env: cleanEnv({
      GATEWAY_PORT: String(port),
      GATEWAY_SHARED_SECRET: 'e'.repeat(40),
      DATABASE_URL: `postgres://u:p@127.0.0.1:${trapPort}/db`,
      AMQP_URL: `amqp://127.0.0.1:${trapPort}`,
      DATA_DIR: join(dataDir, 'data'),
      LOG_LEVEL: 'warn',
    }),
  });
  t.teardown(() => {
    child.process.kill('SIGKILL');
    trap.close();
    rmSync(dataDir, { recursive: true, force: true });
  });
  const early = child.exited.then((r) => {
    throw new Error(`the edge exited early (${r.code}): ${child.stderr().slice(-2000)}`);
  });
  const status = await Promise.race([
    early,
    waitFor(async () => (await fetch(`http://127.0.0.1:${port}/healthz`).catch(() => undefined))?.status, 40_000, 'the edge answering', 100),
  ]);
  early.catch(() => {});
  t.is(status, 200);
  t.is(dialled, 0, 'no connection to the database or the bus');
  t.false(existsSync(join(dataDir, 'data')), 'no embedded database created');
  child.process.kill('SIGTERM');
  t.is((await child.exited).code, 0, child.stderr().slice(-2000));
});

test('a bad edge setting stops npm start with one line naming it', async (t) => {
  const child = startChild(process.execPath, entryArgs('services/platform/main.ts'), {
    env: cleanEnv({ EDGE_RATE_LIMIT_IP_PER_MINUTE: 'lots' }),
  });
  const { code } = await child.exited;
  t.is(code, 1);
  const lines = child.stderr().trim().split('\n');
  t.is(lines.length, 1, child.stderr());
  t.regex(lines[0]!, /^invalid configuration: EDGE_RATE_LIMIT_IP_PER_MINUTE: /);
});
