import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { pino } from 'pino';
import { createBwrapSandbox, type BwrapOptions } from '../../services/mcp-tools/sandbox/bwrap.js';
import { SandboxUnavailableError } from '../../services/mcp-tools/sandbox/types.js';
import { cleanEnv, entryArgs } from '../helpers/process.js';

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

test.serial('a descriptor the service inherited without close-on-exec never reaches the sandboxed code, which starts with 0, 1 and 2 only', async (t) => {
  // The service process is a child that got fd 40 open and inheritable (one end of a pipe this test
  // holds the other end of), as a supervisor or shell may leave one: Node marks its own
  // descriptors close-on-exec, not inherited ones, and setpriv, prlimit and bwrap pass them on.
  const INHERITED = 40;
  const wrapper = 'import os, sys\nos.dup2(3, 40, inheritable=True)\nos.close(3)\nos.execv(sys.argv[1], sys.argv[1:])';
  const child = spawn('/usr/bin/python3', ['-c', wrapper, process.execPath, ...entryArgs('test/mcp-tools/fixtures/sandbox-inherited-fds.ts')], {
    env: cleanEnv({ INHERITED_FD: String(INHERITED), SANDBOX_UID_BASE: String(UID_BASE + 10) }),
    stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  let arrived = '';
  child.stdout!.on('data', (chunk) => (out += chunk));
  child.stderr!.on('data', (chunk) => (err += chunk));
  // The pipe ends when the last holder of its write end (the child, and anything it passed it to) is gone.
  const pipeEnded = new Promise<void>((resolve) => {
    const pipe = child.stdio[3] as NodeJS.ReadableStream;
    pipe.on('data', (chunk) => (arrived += chunk));
    pipe.on('end', resolve);
    pipe.on('close', resolve);
    pipe.on('error', () => resolve());
  });
  const [code] = (await once(child, 'exit')) as [number | null];
  await pipeEnded;
  t.is(code, 0, err);
  const result = JSON.parse(out.trim().split('\n').at(-1)!);
  t.is(result.unavailable, null);
  t.is(result.exit_code, 0, result.stderr);
  const seen = JSON.parse(result.stdout);
  t.deepEqual(seen.fds, [0, 1, 2], `the sandboxed code had more open: ${JSON.stringify(seen)}`);
  t.is(seen.wrote, 'OSError', 'writing to the inherited descriptor fails');
  t.false(Array.isArray(seen.pid1) && seen.pid1.includes(INHERITED), `the sandbox's PID 1 holds it: ${JSON.stringify(seen.pid1)}`);
  t.is(arrived, '', 'nothing from the sandbox came through the inherited descriptor');
});

test.serial('the code runs as /sandbox/main.py: its tracebacks, line numbers, argv and __main__ are those of the program itself', async (t) => {
  const sandbox = await createBwrapSandbox(options());
  const out = await sandbox.run({
    code: 'import sys\nprint(sys.argv, __name__, __file__, sys.flags.isolated, sys.flags.no_site)\n\ndef f():\n    raise ValueError("otter")\nf()\n',
    timeoutMs: 10_000,
    userId: 'usr_a',
  });
  t.is(out.stdout, "['/sandbox/main.py'] __main__ /sandbox/main.py 1 1\n");
  t.is(out.exit_code, 1);
  t.is(
    out.stderr,
    'Traceback (most recent call last):\n  File "/sandbox/main.py", line 6, in <module>\n    f()\n  File "/sandbox/main.py", line 5, in f\n    raise ValueError("otter")\nValueError: otter\n',
  );
});
