import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { cleanEnv, entryArgs, startChild } from '../helpers/process.js';

// NODE_ENV=production refuses the laptop conveniences, one line each, unless PRODUCTION_ALLOW names them.
const start = (env: Record<string, string>) => startChild(process.execPath, entryArgs('services/platform/main.ts'), { env: cleanEnv(env) });

test('a production start without settings refuses PGlite, local rate limits, generated secret and master key, one line each', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'prod-start-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const child = start({ NODE_ENV: 'production', DATA_DIR: dataDir });
  const { code } = await child.exited;
  t.is(code, 1);
  const lines = child.stderr().trim().split('\n');
  t.is(lines.length, 4, child.stderr());
  t.regex(lines[0]!, /^refusing to start: .*PGlite.*DATABASE_URL.*PRODUCTION_ALLOW=pglite/);
  t.regex(lines[1]!, /in-process rate-limit counters.*REDIS_URL/);
  t.regex(lines[2]!, /generated GATEWAY_SHARED_SECRET/);
  t.regex(lines[3]!, /generate MASTER_KEY/);
});

test('PRODUCTION_ALLOW accepts each knowingly; set values need no allowance; a bad entry is one clear line', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'prod-start-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const partly = start({ NODE_ENV: 'production', DATA_DIR: dataDir, PRODUCTION_ALLOW: 'pglite,local-rate-limits', GATEWAY_SHARED_SECRET: 'x'.repeat(40) });
  await partly.exited;
  t.deepEqual(
    partly.stderr().trim().split('\n').map((l) => /MASTER_KEY/.test(l)),
    [true],
    partly.stderr(),
  );
  const bad = start({ NODE_ENV: 'production', DATA_DIR: dataDir, PRODUCTION_ALLOW: 'everything' });
  const { code } = await bad.exited;
  t.is(code, 1);
  t.regex(bad.stderr(), /PRODUCTION_ALLOW/);
  t.notRegex(bad.stderr(), /\n\s+at /, 'no stack trace');
});
