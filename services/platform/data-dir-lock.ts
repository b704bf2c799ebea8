import { linkSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

/**
 * One platform per data directory. The embedded database (PGlite) is a set of files that one
 * process owns: a second process on the same files would see only its own writes, and lose them
 * on restart. The lock is a file created exclusively (`wx`) naming its owner: the pid on the first
 * line, then (where /proc exists, i.e. Linux) the process's start time and the boot id:
 *
 *     1234
 *     start 567890
 *     boot 897fb088-7406-4a5c-a9e5-8600a84ab0f4
 *
 * A lock is held only while that same process runs. One left by a process that no longer exists
 * (a crash, `kill -9`) is taken over, and so is one whose pid another process has since got: after
 * a reboot or a container restart the platform often starts with a small pid that an unrelated
 * process (or the lock's own old pid) now has. Without /proc, and for a lock holding only a pid (an
 * older platform's), a live pid is taken for the owner.
 */
export class DataDirLockedError extends Error {
  constructor(readonly dir: string, readonly pid: number) {
    super(`DATA_DIR ${dir} is in use by another platform process (pid ${pid}); stop it or choose another DATA_DIR`);
    this.name = 'DataDirLockedError';
  }
}

export interface DataDirLock {
  release(): void;
}

const LOCK_FILE = 'platform.lock';

/** `procDir` is where the process table is read (a test points it elsewhere to act as non-Linux). */
export function lockDataDir(dataDir: string, pid = process.pid, procDir = '/proc'): DataDirLock {
  const dir = resolve(dataDir);
  mkdirSync(dir, { recursive: true });
  const file = join(dir, LOCK_FILE);
  const own = identity(pid, procDir);
  const content = `${pid}\n${own ? `start ${own.start}\nboot ${own.boot}\n` : ''}`;
  // The lock appears whole or not at all: written under a name of this process's own, then linked
  // into place (a link fails if the name exists, as an exclusive create does). A lock created empty
  // and written after would read as unreadable, hence stale, to a platform starting in that instant.
  const draft = `${file}.${pid}.draft`;
  writeFileSync(draft, content, { mode: 0o600 });
  try {
    for (let attempt = 0; ; attempt++) {
      try {
        linkSync(draft, file);
        break;
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
        const holder = parseLock(readFileSync(file, 'utf8'));
        if (attempt > 0 || (holder && holder.pid !== pid && holds(holder, procDir))) throw new DataDirLockedError(dir, holder?.pid ?? Number.NaN);
        // Stale (its process is gone) or unreadable: remove it and try once more. Of two processes
        // racing here only one wins the link; one that judged the lock stale just as another took it
        // over can still remove the new lock, a window of microseconds at start-up.
        rmSync(file, { force: true });
      }
    }
  } finally {
    rmSync(draft, { force: true });
  }
  let released = false;
  return {
    release() {
      if (released) return;
      released = true;
      try {
        if (readFileSync(file, 'utf8') === content) rmSync(file, { force: true });
      } catch {
        // already gone
      }
    },
  };
}

interface Identity {
  /** Start time in clock ticks since boot (field 22 of /proc/<pid>/stat). */
  start: string;
  boot: string;
}

interface LockHolder {
  pid: number;
  /** Absent in a lock written without /proc or by an older platform. */
  identity?: Identity;
}

function parseLock(text: string): LockHolder | undefined {
  const [first = '', ...rest] = text.split('\n');
  const pid = Number.parseInt(first.trim(), 10);
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  const field = (name: string) => rest.find((line) => line.startsWith(`${name} `))?.slice(name.length + 1).trim();
  const start = field('start');
  const boot = field('boot');
  return { pid, identity: start && boot ? { start, boot } : undefined };
}

/** True while the process that wrote the lock still runs. */
function holds(holder: LockHolder, procDir: string): boolean {
  if (holder.identity) {
    const boot = bootId(procDir);
    // Written before the last boot: no process of that boot runs any more.
    if (boot !== undefined && boot !== holder.identity.boot) return false;
    const start = startTime(holder.pid, procDir);
    if (start !== undefined) return start === holder.identity.start;
    // Its /proc entry cannot be read (gone, or hidden by `hidepid`): the pid alone decides.
  }
  return isAlive(holder.pid);
}

function identity(pid: number, procDir: string): Identity | undefined {
  const boot = bootId(procDir);
  const start = boot === undefined ? undefined : startTime(pid, procDir);
  return boot !== undefined && start !== undefined ? { start, boot } : undefined;
}

function bootId(procDir: string): string | undefined {
  try {
    return readFileSync(join(procDir, 'sys/kernel/random/boot_id'), 'utf8').trim() || undefined;
  } catch {
    return undefined;
  }
}

/** Field 22 of /proc/<pid>/stat. The second field (the name, in parentheses) may hold spaces. */
function startTime(pid: number, procDir: string): string | undefined {
  try {
    const stat = readFileSync(join(procDir, String(pid), 'stat'), 'utf8');
    const value = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
    return value && /^\d+$/.test(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: the process exists but belongs to someone else.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
