import { closeSync, fstatSync, linkSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
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

/**
 * Points inside a takeover where a test runs another starter, to play out a race step by step:
 * `stale` once the lock has been judged stale (nothing claimed yet), `claimed` once this starter
 * holds the takeover claim, just before it reads the lock again and removes it.
 */
export type TakeoverHook = (point: 'stale' | 'claimed') => void;

const LOCK_FILE = 'platform.lock';
const CLAIM_PREFIX = `${LOCK_FILE}.takeover.`;

/** `procDir` is where the process table is read (a test points it elsewhere to act as non-Linux). */
export function lockDataDir(dataDir: string, pid = process.pid, procDir = '/proc', hook?: TakeoverHook): DataDirLock {
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
    for (let removed = 0; ; ) {
      try {
        linkSync(draft, file);
        break;
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
        const seen = readLock(file);
        // Released between the link and the read: the name is free again.
        if (!seen) continue;
        const holder = parseLock(seen.text);
        if (removed > 0 || (holder && holder.pid !== pid && holds(holder, procDir))) throw new DataDirLockedError(dir, holder?.pid ?? Number.NaN);
        // Stale (its process is gone) or unreadable: remove it and try once more.
        hook?.('stale');
        removeStale(dir, file, seen, draft, pid, procDir, hook);
        removed++;
      }
    }
  } finally {
    rmSync(draft, { force: true });
  }
  clearClaims(dir);
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

interface SeenLock {
  /** Which file it was: content alone cannot tell a stale lock from a fresh one of the same pid. */
  dev: number;
  ino: number;
  text: string;
}

/** The lock's inode and content, read through one descriptor so both are of the same file. */
function readLock(file: string): SeenLock | undefined {
  let fd: number;
  try {
    fd = openSync(file, 'r');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
  try {
    const { dev, ino } = fstatSync(fd);
    return { dev, ino, text: readFileSync(fd, 'utf8') };
  } finally {
    closeSync(fd);
  }
}

/**
 * Removes the stale lock `seen`, and never anything else. Two starters may judge the same lock
 * stale at once; if each simply removed "the lock", the slower one could remove the fresh lock the
 * faster one had just linked in its place, and both would run on the same files. Nothing in the
 * file system removes a name only if it is still a given file, so the removal is done under a
 * claim: a takeover file (`platform.lock.takeover.<n>`) created exclusively, holding the claimer's
 * pid, start time and boot id like the lock. Under it the lock is read again, and removed only if it
 * is still the very file judged stale (same inode, same content): another starter can remove it
 * only under the same claim, so between that check and the removal it cannot have been replaced.
 *
 * A claim whose claimer still runs means another starter is taking over: this one stops, naming
 * it (the other will hold the lock). A claim whose claimer is gone (killed in those microseconds)
 * is left in place and the next number is tried: removing it would reopen the race one level down.
 * Leftover claims are cleared by the next process that holds the lock (`clearClaims`); while a live
 * lock is in place every claim's check fails, so clearing them then cannot let two removals meet.
 */
function removeStale(dir: string, file: string, seen: SeenLock, draft: string, pid: number, procDir: string, hook?: TakeoverHook): void {
  let claim: string | undefined;
  for (let n = 0; !claim; ) {
    const name = join(dir, `${CLAIM_PREFIX}${n}`);
    try {
      linkSync(draft, name);
      claim = name;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const other = readLock(name);
      // Given back between the link and the read: try the same number again.
      if (!other) continue;
      const claimer = parseLock(other.text);
      if (claimer && claimer.pid !== pid && holds(claimer, procDir)) throw new DataDirLockedError(dir, claimer.pid);
      n++;
    }
  }
  try {
    hook?.('claimed');
    const now = readLock(file);
    if (now && now.dev === seen.dev && now.ino === seen.ino && now.text === seen.text) rmSync(file, { force: true });
  } finally {
    rmSync(claim, { force: true });
  }
}

function clearClaims(dir: string): void {
  try {
    for (const name of readdirSync(dir)) if (name.startsWith(CLAIM_PREFIX)) rmSync(join(dir, name), { force: true });
  } catch {
    // Best effort: a claim left behind only costs the next takeover one more number.
  }
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
