import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { waitFor } from '../helpers/wait.js';
import { cleanEnv, freePort, startChild } from '../helpers/process.js';
import { startNodeArgs } from '../../bench/lib/procs.js';

// `npm start` on a clean data directory with no external dependency configured: the embedded
// defaults (PGlite, the PostgreSQL queue) come up, every service answers /healthz, SIGTERM exits 0.
// Ports are moved off the defaults so the test does not collide with a developer's running platform.
test('npm start brings every service up on embedded defaults; SIGTERM exits cleanly', async (t) => {
  t.timeout(240_000);
  const dataDir = mkdtempSync(join(tmpdir(), 'platform-start-'));
  const ports = {
    GATEWAY_PORT: await freePort(),
    LLM_API_PORT: await freePort(),
    RESPONSE_API_PORT: await freePort(),
    MEDIA_API_PORT: await freePort(),
    MCP_TOOLS_PORT: await freePort(),
  };
  const env = cleanEnv({ DATA_DIR: dataDir, LOG_LEVEL: 'warn', ...Object.fromEntries(Object.entries(ports).map(([k, v]) => [k, String(v)])) });
  // npm start runs exactly this command; spawning it directly lets SIGTERM reach the platform
  // process as a process manager's would (npm itself re-raises signals instead of exiting 0).
  // Its Node flags read as the bench reads them (it throws unless the script is "node [flags] scripts/start.mjs").
  const child = startChild(process.execPath, [...startNodeArgs(), 'scripts/start.mjs'], { env });
  t.teardown(() => {
    child.process.kill('SIGKILL');
    rmSync(dataDir, { recursive: true, force: true });
  });
  const early = child.exited.then((r) => {
    throw new Error(`npm start exited early (${r.code}): ${child.stderr().slice(-2000)}`);
  });
  for (const [name, port] of Object.entries(ports)) {
    const status = await Promise.race([
      early,
      waitFor(async () => {
        const res = await fetch(`http://127.0.0.1:${port}/healthz`).catch(() => undefined);
        return res?.status;
      }, 200_000, `${name} answering`, 200),
    ]);
    t.is(status, 200, `${name} /healthz`);
  }
  early.catch(() => {});
  // Once up it says where to connect and what it generated, never the values.
  const summary = await waitFor(() => (/generated: MASTER_KEY/.test(child.stdout()) ? child.stdout() : null), 30_000, 'start summary');
  t.true(summary.includes(`platform ready: http://127.0.0.1:${ports.GATEWAY_PORT}`), summary);
  t.regex(summary, /generated: GATEWAY_SHARED_SECRET \(in memory/);
  const masterKey = readFileSync(join(dataDir, 'master.key'), 'utf8').trim();
  t.false(child.stdout().includes(masterKey) || child.stderr().includes(masterKey), 'the master key value never printed');
  child.process.kill('SIGTERM');
  const { code } = await child.exited;
  t.is(code, 0, child.stderr().slice(-2000));
});
