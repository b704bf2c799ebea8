import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import type { ExecutionContext } from 'ava';
import { cleanEnv, entryArgs, freePort, jsonLogLines, processAlive, startChild, waitWhileRunning, type Child } from '../helpers/process.js';

// The supervisor of PLATFORM_PROCESSES never settles for fewer copies than it was asked for: a
// replacement that fails as it starts (the database briefly unreachable, say) is tried again, later
// each time, until one serves, even when no copy is left. Stand-in copies (fixtures/) fail or serve
// as a control file says, so the test decides when starts fail. A scrape of the group's /metrics
// while a series cannot be read is answered without it, and never takes a copy down. The platform
// itself under the supervisor is platform-processes.test.ts's.

const logLines = (child: Child) => jsonLogLines<{ msg?: string; pid?: number; replaces?: number }>(child);

interface Supervised {
  supervisor: Child;
  /** What the stand-in copies do as they start: `serve`, `fail` or `slow`. */
  control(mode: 'serve' | 'fail' | 'slow'): Promise<void>;
  /** Waits for `check`, failing at once (with the output) if the supervisor exits first. */
  until<T>(check: () => T | undefined | null | false, what: string): Promise<T>;
}

/** The fixture supervisor over two stand-in copies; extra files and settings by `env`. */
async function startSupervisor(t: ExecutionContext, mode: 'serve' | 'slow', env: Record<string, string> = {}): Promise<Supervised> {
  const dir = await mkdtemp(join(tmpdir(), 'supervisor-'));
  const controlFile = join(dir, 'control');
  const control = (m: string) => writeFile(controlFile, m);
  await control(mode);
  const supervisor = startChild(process.execPath, entryArgs('test/process/fixtures/supervisor.ts'), {
    env: cleanEnv({ NODE_ENV: 'test', COPY_CONTROL_FILE: controlFile, ...env }),
  });
  t.teardown(async () => {
    if (supervisor.process.exitCode === null && supervisor.process.signalCode === null) {
      supervisor.process.kill('SIGKILL');
      await supervisor.exited;
    }
    for (const line of logLines(supervisor)) for (const pid of [line.pid, line.replaces]) if (pid && processAlive(pid)) process.kill(pid, 'SIGKILL');
    await rm(dir, { recursive: true, force: true });
  });
  return {
    supervisor,
    control,
    until: (check, what) => waitWhileRunning(supervisor, 'the supervisor', check, 60_000, what, 20),
  };
}

const servingPids = (child: Child) => {
  const match = /serving: (\d+),(\d+)/.exec(child.stdout());
  return match ? [Number(match[1]), Number(match[2])] : undefined;
};

test('replacements that fail as they start are retried until they serve, even with no copy left', async (t) => {
  const { supervisor, control, until } = await startSupervisor(t, 'serve');
  const first = await until(() => servingPids(supervisor), 'both copies serving');

  // Every start fails from now on; both copies go.
  await control('fail');
  for (const pid of first) process.kill(pid, 'SIGKILL');
  await until(() => logLines(supervisor).filter((l) => l.msg === 'platform process exited before it served; starting another').length >= 3, 'failed starts, each followed by another try');
  t.true(supervisor.process.exitCode === null, 'the supervisor runs on with no copy serving');

  // Starts succeed again: the next tries serve, and the supervisor is back to two copies.
  await control('serve');
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
  const { supervisor, until } = await startSupervisor(t, 'slow');
  const starting = await until(() => /copy starting: (\d+)/.exec(supervisor.stdout()), 'the first copy starting');
  supervisor.process.kill('SIGTERM');
  const { code } = await supervisor.exited;
  t.is(code, 0, supervisor.stdout() + supervisor.stderr());
  t.false(processAlive(Number(starting[1])), 'the copy stopped');
  t.false(supervisor.stdout().includes('the platform did not start'));
});

test('a scrape while a series cannot be read leaves the copies out of the page: no copy goes down', async (t) => {
  const port = await freePort();
  const dir = await mkdtemp(join(tmpdir(), 'supervisor-metrics-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const metricsControl = join(dir, 'metrics');
  await writeFile(metricsControl, 'ok');
  const { supervisor, until } = await startSupervisor(t, 'serve', { COPY_METRICS_PORT: String(port), COPY_METRICS_CONTROL: metricsControl });
  const pids = await until(() => servingPids(supervisor), 'both copies serving');
  const scrape = async () => {
    const res = await fetch(`http://127.0.0.1:${port}/metrics`, { headers: { connection: 'close' } });
    return { status: res.status, page: await res.text() };
  };
  const healthy = await scrape();
  for (const pid of pids) t.regex(healthy.page, new RegExp(`^stand_in_up\\{[^}]*pid="${pid}"[^}]*\\} 1$`, 'm'));

  // The read fails in both copies: the scrape is still answered, and both copies stay up.
  await writeFile(metricsControl, 'throw');
  const failing = await scrape();
  t.is(failing.status, 200);
  t.notRegex(failing.page, /^stand_in_up\{/m);
  await writeFile(metricsControl, 'ok');
  const again = await scrape();
  for (const pid of pids) {
    t.true(processAlive(pid), `copy ${pid} still runs`);
    t.regex(again.page, new RegExp(`^stand_in_up\\{[^}]*pid="${pid}"[^}]*\\} 1$`, 'm'), `copy ${pid} back on the page`);
  }
  t.false(logLines(supervisor).some((l) => l.msg?.startsWith('platform process exited')), 'no copy exited');
});
