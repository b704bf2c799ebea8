import net from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { waitFor } from '../helpers/wait.js';
import { cleanEnv, entryArgs, freePort, startChild, type Child } from '../helpers/process.js';

/**
 * What an operator sees when the platform cannot start for a reason they can fix: one clear line
 * on stderr and exit code 1, never a stack trace. Real child processes run the platform's entry
 * point (`entryArgs`: compiled as in `npm start`, or through tsx when the suite runs from source).
 */

async function portsEnv(): Promise<Record<string, string>> {
  return {
    GATEWAY_PORT: String(await freePort()),
    LLM_API_PORT: String(await freePort()),
    RESPONSE_API_PORT: String(await freePort()),
    MEDIA_API_PORT: String(await freePort()),
    MCP_TOOLS_PORT: String(await freePort()),
  };
}

function platformChild(env: Record<string, string>): Child {
  return startChild(process.execPath, entryArgs('services/platform/main.ts'), { env: cleanEnv({ LOG_LEVEL: 'warn', ...env }) });
}

/** stderr without Node's own warnings (e.g. experimental loader notices). */
const ownLines = (stderr: string) => stderr.split('\n').filter((l) => l.trim() && !/Warning|--trace-warnings/.test(l));

test.serial('a second platform on the same DATA_DIR refuses with one line naming the directory and the holder pid', async (t) => {
  t.timeout(180_000);
  const dataDir = mkdtempSync(join(tmpdir(), 'platform-lock-'));
  const firstEnv = await portsEnv();
  const first = platformChild({ DATA_DIR: dataDir, ...firstEnv });
  t.teardown(() => {
    first.process.kill('SIGKILL');
    rmSync(dataDir, { recursive: true, force: true });
  });
  const early = first.exited.then((r) => {
    throw new Error(`first platform exited (${r.code}): ${first.stderr().slice(-2000)}`);
  });
  early.catch(() => {});
  await Promise.race([early, waitFor(async () => (await fetch(`http://127.0.0.1:${firstEnv.GATEWAY_PORT}/healthz`).catch(() => undefined))?.ok, 150_000, 'first platform up', 200)]);

  const second = platformChild({ DATA_DIR: dataDir, ...(await portsEnv()) });
  t.teardown(() => second.process.kill('SIGKILL'));
  const { code } = await second.exited;
  t.is(code, 1);
  const lines = ownLines(second.stderr());
  t.is(lines.length, 1, second.stderr());
  t.true(lines[0]!.includes(dataDir), lines[0]);
  t.true(lines[0]!.includes(`pid ${first.process.pid}`), lines[0]);
  // The first one is untouched.
  t.true((await fetch(`http://127.0.0.1:${firstEnv.GATEWAY_PORT}/healthz`)).ok);
});

test.serial('a port already in use gives one line naming the address and the setting', async (t) => {
  t.timeout(180_000);
  const dataDir = mkdtempSync(join(tmpdir(), 'platform-port-'));
  const blocker = net.createServer();
  await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
  const taken = (blocker.address() as net.AddressInfo).port;
  t.teardown(() => {
    blocker.close();
    rmSync(dataDir, { recursive: true, force: true });
  });
  const child = platformChild({ DATA_DIR: dataDir, ...(await portsEnv()), LLM_API_PORT: String(taken) });
  t.teardown(() => child.process.kill('SIGKILL'));
  const { code } = await child.exited;
  t.is(code, 1);
  const lines = ownLines(child.stderr());
  t.is(lines.length, 1, child.stderr());
  t.regex(lines[0]!, new RegExp(`127\\.0\\.0\\.1:${taken}.*already in use.*LLM_API_PORT`));
  // The lock was released on the way out: the same directory starts cleanly afterwards.
  const againEnv = await portsEnv();
  const again = platformChild({ DATA_DIR: dataDir, ...againEnv });
  t.teardown(() => again.process.kill('SIGKILL'));
  const earlyExit = again.exited.then((r) => `exited ${r.code}: ${again.stderr()}`);
  const up = waitFor(async () => ((await fetch(`http://127.0.0.1:${againEnv.GATEWAY_PORT}/healthz`).catch(() => undefined))?.ok ? 'up' : undefined), 150_000, 'restart', 200);
  t.is(await Promise.race([up, earlyExit]), 'up');
});

test.serial('an edge token lifetime below the access-token TTL refuses the start with one line naming both', async (t) => {
  t.timeout(180_000);
  const dataDir = mkdtempSync(join(tmpdir(), 'platform-ttl-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const env = await portsEnv();
  const child = platformChild({ DATA_DIR: dataDir, ...env, EDGE_JWT_MAX_LIFETIME_SECONDS: '600', ACCESS_TOKEN_TTL_SECONDS: '900' });
  t.teardown(() => child.process.kill('SIGKILL'));
  // A platform that starts instead of refusing says so at once rather than at the test's timeout.
  const served = waitFor(async () => ((await fetch(`http://127.0.0.1:${env.GATEWAY_PORT}/healthz`).catch(() => undefined))?.ok ? 'served' : undefined), 150_000, 'start', 200);
  served.catch(() => {});
  t.is(await Promise.race([child.exited.then(() => 'exited'), served]), 'exited');
  t.is((await child.exited).code, 1);
  const lines = ownLines(child.stderr());
  t.is(lines.length, 1, child.stderr());
  t.regex(lines[0]!, /^refusing to start: ACCESS_TOKEN_TTL_SECONDS=900 is above EDGE_JWT_MAX_LIFETIME_SECONDS=600/);
});
