import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test, { type ExecutionContext } from 'ava';
import { DataDirLockedError, lockDataDir, type DataDirLock } from '../../services/platform/data-dir-lock.js';

// The DATA_DIR lock (`DATA_DIR/platform.lock`) names its owner by pid, process start time and boot
// id, so a lock whose pid now belongs to an unrelated process (a reboot, a container restart) is
// taken over, while a lock whose owner still runs refuses a second platform. Unit level: the lock
// files are written by hand; test/process/startup-refusals.test.ts runs two real platforms. Two
// starters racing for a stale lock are played out step by step: the takeover hook runs the second
// starter at a chosen point inside the first.

/** A process that exists and is not this one: the test runner that started this file. */
const other = process.ppid;
/** Above Linux's highest possible pid (2^22): no process has it. */
const nobody = 2 ** 22 + 1;

/** Field 22 of /proc/<pid>/stat (start time in clock ticks since boot); the name may hold spaces. */
function startTicks(pid: number): string {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]!;
}
const bootId = () => readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();

function dataDir(t: ExecutionContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'data-dir-lock-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}
const lockFile = (dir: string) => join(dir, 'platform.lock');
const holderOf = (dir: string) => Number.parseInt(readFileSync(lockFile(dir), 'utf8'), 10);
const claimFile = (dir: string) => join(dir, 'platform.lock.takeover.0');
/** A lock (or claim) as the still-running process `pid` would have written it. */
const liveContent = (pid: number) => `${pid}\nstart ${startTicks(pid)}\nboot ${bootId()}\n`;
const staleContent = () => `${nobody}\nstart 1\nboot ${bootId()}\n`;

test('a lock whose pid is alive but belongs to another process (other start time) is taken over', (t) => {
  const dir = dataDir(t);
  const later = String(BigInt(startTicks(other)) + 1n);
  writeFileSync(lockFile(dir), `${other}\nstart ${later}\nboot ${bootId()}\n`);
  const lock = lockDataDir(dir);
  t.is(holderOf(dir), process.pid);
  lock.release();
  t.false(existsSync(lockFile(dir)));
});

test('a lock written before the last boot is taken over, whatever process has its pid now', (t) => {
  const dir = dataDir(t);
  writeFileSync(lockFile(dir), `${other}\nstart ${startTicks(other)}\nboot 00000000-0000-0000-0000-000000000000\n`);
  const lock = lockDataDir(dir);
  t.is(holderOf(dir), process.pid);
  lock.release();
});

test('a lock whose owner still runs (same pid, start time and boot) refuses, naming the pid', (t) => {
  const dir = dataDir(t);
  const content = `${other}\nstart ${startTicks(other)}\nboot ${bootId()}\n`;
  writeFileSync(lockFile(dir), content);
  const error = t.throws(() => lockDataDir(dir), { instanceOf: DataDirLockedError });
  t.is(error!.pid, other);
  t.true(error!.message.includes(dir));
  t.is(readFileSync(lockFile(dir), 'utf8'), content);
});

test('the lock this process writes names it by pid, start time and boot id, and a second lock of another pid is refused', (t) => {
  const dir = dataDir(t);
  const lock = lockDataDir(dir);
  t.is(readFileSync(lockFile(dir), 'utf8'), `${process.pid}\nstart ${startTicks(process.pid)}\nboot ${bootId()}\n`);
  // As another process on the same machine would see it.
  t.throws(() => lockDataDir(dir, other), { instanceOf: DataDirLockedError });
  lock.release();
  t.false(existsSync(lockFile(dir)));
});

test('an old lock holding only a pid is still read: refused while that pid runs, taken over once it is gone', (t) => {
  const dir = dataDir(t);
  writeFileSync(lockFile(dir), `${other}\n`);
  t.is(t.throws(() => lockDataDir(dir), { instanceOf: DataDirLockedError })!.pid, other);
  writeFileSync(lockFile(dir), `${nobody}\n`);
  const lock = lockDataDir(dir);
  t.is(holderOf(dir), process.pid);
  lock.release();
});

test('a lock whose pid no longer exists is taken over, whatever start time it records', (t) => {
  const dir = dataDir(t);
  writeFileSync(lockFile(dir), `${nobody}\nstart 1\nboot ${bootId()}\n`);
  lockDataDir(dir).release();
  t.false(existsSync(lockFile(dir)));
});

test('without /proc (not Linux) the lock holds a pid only, and a live pid is held whatever the file records', (t) => {
  const dir = dataDir(t);
  const noProc = join(dir, 'no-proc');
  writeFileSync(lockFile(dir), `${other}\nstart 1\nboot ${bootId()}\n`);
  t.is(t.throws(() => lockDataDir(dir, process.pid, noProc), { instanceOf: DataDirLockedError })!.pid, other);
  rmSync(lockFile(dir));
  const lock = lockDataDir(dir, process.pid, noProc);
  t.is(readFileSync(lockFile(dir), 'utf8'), `${process.pid}\n`);
  lock.release();
  t.false(existsSync(lockFile(dir)));
});

test('release leaves a lock another process has taken over since', (t) => {
  const dir = dataDir(t);
  const lock = lockDataDir(dir);
  const theirs = `${other}\nstart ${startTicks(other)}\nboot ${bootId()}\n`;
  writeFileSync(lockFile(dir), theirs);
  lock.release();
  t.is(readFileSync(lockFile(dir), 'utf8'), theirs);
});

test('a starter that judged the lock stale never removes the fresh lock a faster starter put in its place', (t) => {
  const dir = dataDir(t);
  writeFileSync(lockFile(dir), staleContent());
  let faster: DataDirLock | undefined;
  // The slower starter (pid `other`) has read the stale lock; before it removes anything, the faster
  // one (this process) removes the same stale lock and links its own.
  const error = t.throws(
    () =>
      lockDataDir(dir, other, '/proc', (point) => {
        if (point === 'stale' && !faster) faster = lockDataDir(dir);
      }),
    { instanceOf: DataDirLockedError },
  );
  t.truthy(faster);
  t.is(error!.pid, process.pid);
  t.is(readFileSync(lockFile(dir), 'utf8'), liveContent(process.pid));
  faster!.release();
  t.false(existsSync(lockFile(dir)));
});

test('while one starter holds the takeover claim, a second one on the same stale lock stops, naming it', (t) => {
  const dir = dataDir(t);
  writeFileSync(lockFile(dir), staleContent());
  let second: unknown;
  const lock = lockDataDir(dir, other, '/proc', (point) => {
    if (point !== 'claimed') return;
    try {
      lockDataDir(dir).release();
    } catch (error) {
      second = error;
    }
  });
  t.true(second instanceof DataDirLockedError);
  t.is((second as DataDirLockedError).pid, other);
  t.is(readFileSync(lockFile(dir), 'utf8'), liveContent(other));
  t.false(existsSync(claimFile(dir)));
  lock.release();
  t.false(existsSync(lockFile(dir)));
});

test('a takeover claim whose claimer still runs refuses the takeover and leaves the stale lock to it', (t) => {
  const dir = dataDir(t);
  writeFileSync(lockFile(dir), staleContent());
  writeFileSync(claimFile(dir), liveContent(other));
  t.is(t.throws(() => lockDataDir(dir), { instanceOf: DataDirLockedError })!.pid, other);
  t.is(readFileSync(lockFile(dir), 'utf8'), staleContent());
  t.is(readFileSync(claimFile(dir), 'utf8'), liveContent(other));
});

test('a takeover claim left by a claimer that is gone is passed over, and cleared once the lock is held', (t) => {
  const dir = dataDir(t);
  writeFileSync(lockFile(dir), staleContent());
  writeFileSync(claimFile(dir), staleContent());
  const lock = lockDataDir(dir);
  t.is(readFileSync(lockFile(dir), 'utf8'), liveContent(process.pid));
  t.false(existsSync(claimFile(dir)));
  lock.release();
  t.false(existsSync(lockFile(dir)));
});
