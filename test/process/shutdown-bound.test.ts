import test from 'ava';
import { cleanEnv, entryArgs, jsonLogLines, startChild, waitWhileRunning } from '../helpers/process.js';
import { shutdownBoundMs } from '../../services/kit/index.js';

// A stop that hangs (a close that never answers) must not keep the process forever after SIGTERM:
// past its bound it exits 1 with a line naming the step that hung.

test('a stop hung in one step exits 1 once its bound passes, naming the step', async (t) => {
  const child = startChild(process.execPath, entryArgs('test/process/fixtures/stuck-shutdown.ts'), { env: cleanEnv({ STOP_BOUND_MS: '300' }) });
  t.teardown(() => child.process.kill('SIGKILL'));
  await waitWhileRunning(child, 'stuck-shutdown', () => child.stdout().includes('stuck-shutdown ready'), 30_000, 'ready');
  child.process.kill('SIGTERM');
  const { code } = await child.exited;
  t.is(code, 1);
  const line = jsonLogLines<{ msg: string; step?: string }>(child).find((l) => l.msg.startsWith('shutdown did not finish in time'));
  t.is(line?.step, 'close bus');
  t.false(jsonLogLines<{ msg: string }>(child).some((l) => l.msg === 'stopped'));
});

test('the platform bounds its stop at the drain plus time to close, below the longest timer', (t) => {
  t.is(shutdownBoundMs(10_000), 25_000);
  t.is(shutdownBoundMs(0), 15_000);
  t.is(shutdownBoundMs(2_147_483_647), 2_147_483_647);
});

test('a signal after a stop request is not a second signal: the drain finishes and the process exits 0', async (t) => {
  const child = startChild(process.execPath, entryArgs('test/process/fixtures/requested-stop.ts'), { env: cleanEnv() });
  t.teardown(() => child.process.kill('SIGKILL'));
  const until = (text: string) => waitWhileRunning(child, 'requested-stop', () => child.stdout().includes(text), 30_000, text);
  await until('requested-stop ready');
  child.process.kill('SIGUSR1');
  await until('draining');
  child.process.kill('SIGTERM');
  await until('still draining');
  child.process.kill('SIGUSR2');
  t.is((await child.exited).code, 0);
  t.true(jsonLogLines<{ msg: string }>(child).some((l) => l.msg === 'stopped'));
});

test('two signals during a drain still exit at once with code 1', async (t) => {
  const child = startChild(process.execPath, entryArgs('test/process/fixtures/requested-stop.ts'), { env: cleanEnv() });
  t.teardown(() => child.process.kill('SIGKILL'));
  const until = (text: string) => waitWhileRunning(child, 'requested-stop', () => child.stdout().includes(text), 30_000, text);
  await until('requested-stop ready');
  child.process.kill('SIGTERM');
  await until('draining');
  child.process.kill('SIGINT');
  t.is((await child.exited).code, 1);
  t.true(jsonLogLines<{ msg: string }>(child).some((l) => l.msg.startsWith('second signal')));
});
