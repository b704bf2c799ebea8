import test from 'ava';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { cleanEnv, freePort, startEntryPoint } from '../helpers/process.js';

/**
 * A service or worker started alone (as deploy/compose runs production) stops like `npm start`: one
 * line on stderr naming the setting and exit code 1, never a stack trace, and the production
 * refusals of its own settings. Real child processes run the entry points.
 */

const ownLines = (stderr: string) => stderr.split('\n').filter((l) => l.trim() && !/Warning|--trace-warnings/.test(l));

async function runAlone(t: import('ava').ExecutionContext, entry: string, env: Record<string, string>) {
  const dataDir = mkdtempSync(join(tmpdir(), 'standalone-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const child = startEntryPoint(entry, cleanEnv({ LOG_LEVEL: 'silent', DATA_DIR: dataDir, LLM_API_PORT: String(await freePort()), GATEWAY_SHARED_SECRET: 'x'.repeat(40), ...env }));
  t.teardown(() => child.process.kill('SIGKILL'));
  const { code } = await child.exited;
  return { code, lines: ownLines(child.stderr()), stderr: child.stderr() };
}

test('a service alone whose DATABASE_URL does not answer: one line naming DATABASE_URL, not the password', async (t) => {
  t.timeout(60_000);
  const closed = await freePort();
  const { code, lines, stderr } = await runAlone(t, 'services/llm-api/main.ts', { DATABASE_URL: `postgres://app:s3cret@127.0.0.1:${closed}/app` });
  t.is(code, 1);
  t.is(lines.length, 1, stderr);
  t.true(lines[0]!.includes('DATABASE_URL') && lines[0]!.includes(`127.0.0.1:${closed}`), lines[0]);
  t.false(stderr.includes('s3cret'));
});

test('a worker alone whose DATABASE_URL does not answer: one line naming DATABASE_URL', async (t) => {
  t.timeout(60_000);
  const closed = await freePort();
  const { code, lines, stderr } = await runAlone(t, 'workers/webhook-delivery/main.ts', { DATABASE_URL: `postgres://app:s3cret@127.0.0.1:${closed}/app` });
  t.is(code, 1);
  t.is(lines.length, 1, stderr);
  t.true(lines[0]!.includes('DATABASE_URL'), lines[0]);
});

test('a bad MASTER_KEY stops a service alone at its settings, with one line', async (t) => {
  t.timeout(60_000);
  const { code, lines, stderr } = await runAlone(t, 'services/llm-api/main.ts', { MASTER_KEY: 'change-me-0000000000000000000000000000000000000000000000000000000' });
  t.is(code, 1);
  t.is(lines.length, 1, stderr);
  t.regex(lines[0]!, /^invalid configuration: MASTER_KEY: /);
});

test('a production start alone refuses what npm start refuses for its own settings', async (t) => {
  t.timeout(60_000);
  const service = await runAlone(t, 'services/llm-api/main.ts', { NODE_ENV: 'production' });
  t.is(service.code, 1);
  t.true(service.lines.some((l) => l.includes('DATABASE_URL') && l.startsWith('refusing to start')), service.stderr);
  t.true(service.lines.some((l) => l.includes('MASTER_KEY') && l.startsWith('refusing to start')), service.stderr);
  t.true(service.lines.every((l) => l.startsWith('refusing to start')), service.stderr);
  const worker = await runAlone(t, 'workers/provider-sync/main.ts', { NODE_ENV: 'production', TRUSTED_PROXIES: '0.0.0.0/0' });
  t.is(worker.code, 1);
  t.true(worker.lines.some((l) => l.includes('TRUSTED_PROXIES')), worker.stderr);
  t.true(worker.lines.every((l) => l.startsWith('refusing to start')), worker.stderr);
});

test('a setting checked while the service starts (KEYCLOAK_URL without the rest) is one line too, not a stack trace', async (t) => {
  t.timeout(60_000);
  const { code, lines, stderr } = await runAlone(t, 'services/llm-api/main.ts', { KEYCLOAK_URL: `http://127.0.0.1:${await freePort()}` });
  t.is(code, 1);
  t.is(lines.length, 1, stderr);
  t.regex(lines[0]!, /^invalid configuration: KEYCLOAK_REALM: /);
});
