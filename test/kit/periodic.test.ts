import test from 'ava';
import { runEvery } from '../../services/kit/index.js';

// The kit's periodic task (batch writers, the embedded vacuum, the webhook and media sweeps): a failed run is reported and the
// next one still comes; runs never overlap; stop waits for the run in progress.
test('a failed run is reported and the next one comes; runs never overlap; stop waits for the run in progress', async (t) => {
  // The task's timer keeps no process alive (by design): this test's own handle does.
  const keepAlive = setInterval(() => {}, 60_000);
  t.teardown(() => clearInterval(keepAlive));
  const errors: string[] = [];
  let runs = 0;
  let active = 0;
  let maxActive = 0;
  let release!: () => void;
  let secondStarted!: () => void;
  const started = new Promise<void>((resolve) => (secondStarted = resolve));
  const periodic = runEvery(
    1,
    async () => {
      runs++;
      active++;
      maxActive = Math.max(maxActive, active);
      try {
        if (runs === 1) throw new Error('first run fails');
        secondStarted();
        await new Promise<void>((resolve) => (release = resolve));
      } finally {
        active--;
      }
    },
    (error) => errors.push(error.message),
  );
  await started;
  t.deepEqual(errors, ['first run fails']);
  let stopped = false;
  const stopping = periodic.stop().then(() => (stopped = true));
  await new Promise((resolve) => setImmediate(resolve));
  t.false(stopped, 'stop resolved while a run was in progress');
  release();
  await stopping;
  t.is(runs, 2);
  t.is(maxActive, 1);
});

test('with immediate, the first run comes at once, then every interval; stop before a run cancels it', async (t) => {
  const keepAlive = setInterval(() => {}, 60_000);
  t.teardown(() => clearInterval(keepAlive));
  let runs = 0;
  let firstRun!: () => void;
  const ran = new Promise<void>((resolve) => (firstRun = resolve));
  const started = Date.now();
  const periodic = runEvery(
    60_000,
    async () => {
      runs++;
      firstRun();
    },
    () => {},
    { immediate: true },
  );
  await ran;
  t.true(Date.now() - started < 1000, 'the first run did not wait for the interval');
  await periodic.stop();
  t.is(runs, 1);

  const never = runEvery(60_000, async () => void runs++, () => {});
  await never.stop();
  t.is(runs, 1, 'without immediate, a stop before the first interval means no run');
});

test('a task that throws synchronously is reported like a failed run', async (t) => {
  const keepAlive = setInterval(() => {}, 60_000);
  t.teardown(() => clearInterval(keepAlive));
  let reported!: (message: string) => void;
  const error = new Promise<string>((resolve) => (reported = resolve));
  const periodic = runEvery(
    60_000,
    () => {
      throw new Error('sync failure');
    },
    (e) => reported(e.message),
    { immediate: true },
  );
  t.is(await error, 'sync failure');
  await periodic.stop();
});

test('a run rejected with something that is not an Error reaches onError as an Error, and an onError that throws stops nothing', async (t) => {
  const keepAlive = setInterval(() => {}, 60_000);
  t.teardown(() => clearInterval(keepAlive));
  const messages: string[] = [];
  let runs = 0;
  let thirdRun!: () => void;
  const third = new Promise<void>((resolve) => (thirdRun = resolve));
  const periodic = runEvery(
    1,
    async () => {
      runs++;
      if (runs === 1) throw undefined; // what some libraries reject with
      if (runs === 2) throw new Error('second');
      thirdRun();
    },
    (error) => {
      messages.push(error.message); // reading .message of undefined would throw here
      if (error.message === 'second') throw new Error('the logger failed');
    },
    { immediate: true },
  );
  await third;
  await periodic.stop();
  t.deepEqual(messages, ['periodic task failed with undefined', 'second']);
  t.true(runs >= 3);
});
