import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { cleanEnv, processAlive, startChild, type Child } from '../helpers/process.js';
import { waitFor } from '../helpers/wait.js';

// The supervisor of PLATFORM_PROCESSES never settles for fewer copies than it was asked for: a
// replacement that fails as it starts (the database briefly unreachable, say) is tried again, later
// each time, until one serves, even when no copy is left. Stand-in copies (fixtures/) fail or serve
// as a control file says, so the test decides when starts fail; the platform itself under the
// supervisor is platform-processes.test.ts's.

const logLines = (child: Child) =>
  child
    .stdout()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { msg?: string; pid?: number; replaces?: number });

test('replacements that fail as they start are retried until they serve, even with no copy left', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'supervisor-'));
  const control = join(dir, 'control');
  await writeFile(control, 'serve');
  const supervisor = startChild(process.execPath, ['--import', 'tsx', 'test/process/fixtures/supervisor.ts'], {
    env: cleanEnv({ NODE_ENV: 'test', COPY_CONTROL_FILE: control }),
  });
  t.teardown(async () => {
    if (supervisor.process.exitCode === null && supervisor.process.signalCode === null) {
      supervisor.process.kill('SIGKILL');
      await supervisor.exited;
    }
    for (const line of logLines(supervisor)) for (const pid of [line.pid, line.replaces]) if (pid && processAlive(pid)) process.kill(pid, 'SIGKILL');
    await rm(dir, { recursive: true, force: true });
  });
  const exitedEarly = supervisor.exited.then(({ code, signal }) => {
    throw new Error(`the supervisor exited (${signal ?? code}): ${supervisor.stderr().slice(-2000)}${supervisor.stdout().slice(-2000)}`);
  });
  exitedEarly.catch(() => {});
  const until = <T>(check: () => T | undefined | null | false, what: string) => Promise.race([waitFor(check, 60_000, what, 20), exitedEarly]);

  const serving = await until(() => /serving: (\d+),(\d+)/.exec(supervisor.stdout()), 'both copies serving');
  const first = [Number(serving[1]), Number(serving[2])];

  // Every start fails from now on; both copies go.
  await writeFile(control, 'fail');
  for (const pid of first) process.kill(pid, 'SIGKILL');
  await until(() => logLines(supervisor).filter((l) => l.msg === 'platform process exited before it served; starting another').length >= 3, 'failed starts, each followed by another try');
  t.true(supervisor.process.exitCode === null, 'the supervisor runs on with no copy serving');

  // Starts succeed again: the next tries serve, and the supervisor is back to two copies.
  await writeFile(control, 'serve');
  const restarted = await until(() => {
    const lines = logLines(supervisor).filter((l) => l.msg === 'platform process restarted');
    return lines.length >= 2 && lines;
  }, 'two copies serving again');
  const replacements = restarted.map((l) => l.pid!);
  t.is(new Set(replacements).size, 2);
  for (const pid of replacements) t.true(processAlive(pid), `replacement ${pid} runs`);
  for (const pid of first) t.false(processAlive(pid));

  supervisor.process.kill('SIGTERM');
  t.is((await supervisor.exited).code, 0, supervisor.stderr());
  for (const pid of replacements) t.false(processAlive(pid), `replacement ${pid} stopped`);
});

test('SIGTERM while the first copy is still starting stops it cleanly: exit 0, not a failed start', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'supervisor-'));
  const control = join(dir, 'control');
  await writeFile(control, 'slow');
  const supervisor = startChild(process.execPath, ['--import', 'tsx', 'test/process/fixtures/supervisor.ts'], {
    env: cleanEnv({ NODE_ENV: 'test', COPY_CONTROL_FILE: control }),
  });
  t.teardown(async () => {
    if (supervisor.process.exitCode === null && supervisor.process.signalCode === null) supervisor.process.kill('SIGKILL');
    await rm(dir, { recursive: true, force: true });
  });
  const starting = await waitFor(() => /copy starting: (\d+)/.exec(supervisor.stdout()), 60_000, 'the first copy starting', 20);
  supervisor.process.kill('SIGTERM');
  const { code } = await supervisor.exited;
  t.is(code, 0, supervisor.stdout() + supervisor.stderr());
  t.false(processAlive(Number(starting[1])), 'the copy stopped');
  t.false(supervisor.stdout().includes('the platform did not start'));
});
