import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { pino } from 'pino';
import { createBwrapSandbox, type BwrapOptions } from '../../services/mcp-tools/sandbox/bwrap.js';
import { SandboxUnavailableError } from '../../services/mcp-tools/sandbox/types.js';

// The bubblewrap driver on its own: what it does before any code runs.
const UID_BASE = 63_100;
const options = (over: Partial<BwrapOptions> = {}): BwrapOptions => ({
  bwrapPath: 'bwrap', pythonPath: '/usr/bin/python3', uidBase: UID_BASE, slots: 1,
  memoryMb: 256, maxProcesses: 16, maxFileMb: 1, tmpMb: 1, outputLimitBytes: 1024, logger: pino({ level: 'silent' }),
  ...over,
});

test.serial('a run whose caller is already gone starts nothing (it used to run to its timeout)', async (t) => {
  const sandbox = await createBwrapSandbox(options());
  t.is(sandbox.unavailableReason(), null);
  const gone = new AbortController();
  gone.abort(new Error('the client went away'));
  const outcome = await sandbox.run({ code: 'while True: pass', timeoutMs: 3000, signal: gone.signal, userId: 'usr_a' }).catch((error: Error) => error);
  t.true(outcome instanceof Error, `the run went ahead: ${JSON.stringify(outcome)}`);
  t.is((outcome as Error).message, 'the client went away');
  // No slot was kept: the same user's next run (one slot, one run per user) goes ahead.
  const next = await sandbox.run({ code: 'print(6*7)', timeoutMs: 10_000, userId: 'usr_a' });
  t.is(next.stdout, '42\n');
});

test.serial('a bwrap that is installed but cannot build a sandbox here makes the tool unavailable, saying why, instead of answering runs with its complaint', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'fake-bwrap-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  chmodSync(dir, 0o755); // the sandbox uid runs it
  const fake = join(dir, 'bwrap');
  writeFileSync(fake, '#!/bin/sh\necho "bwrap: Creating new namespace failed: Operation not permitted" >&2\nexit 1\n');
  chmodSync(fake, 0o755);
  const sandbox = await createBwrapSandbox(options({ bwrapPath: fake }));
  t.is(sandbox.unavailableReason(), 'an empty program failed in the sandbox on this host (bwrap: Creating new namespace failed: Operation not permitted)');
  const error = await t.throwsAsync(sandbox.run({ code: 'print(1)', timeoutMs: 2000, userId: 'usr_a' }));
  t.true(error instanceof SandboxUnavailableError);
  t.regex(error!.message, /an empty program failed in the sandbox on this host .*never run outside the sandbox/);
});
