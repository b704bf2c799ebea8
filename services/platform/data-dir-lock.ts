import { closeSync, mkdirSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { join, resolve } from 'node:path';

/**
 * One platform per data directory. The embedded database (PGlite) is a set of files that one
 * process owns: a second process on the same files would see only its own writes, and lose them
 * on restart. The lock is a file created exclusively (`wx`) holding the owner's pid; a lock left
 * by a process that no longer exists (a crash, `kill -9`) is taken over.
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

export function lockDataDir(dataDir: string, pid = process.pid): DataDirLock {
  const dir = resolve(dataDir);
  mkdirSync(dir, { recursive: true });
  const file = join(dir, LOCK_FILE);
  for (let attempt = 0; attempt < 2; attempt++) {
    let fd: number;
    try {
      fd = openSync(file, 'wx', 0o600);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const holder = Number.parseInt(readFileSync(file, 'utf8').trim(), 10);
      if (Number.isInteger(holder) && holder > 0 && holder !== pid && isAlive(holder)) throw new DataDirLockedError(dir, holder);
      // Stale (its process is gone) or unreadable: remove and try once more. Two processes racing
      // here both remove it, but only one wins the exclusive create on the next attempt.
      rmSync(file, { force: true });
      continue;
    }
    writeSync(fd, `${pid}\n`);
    closeSync(fd);
    let released = false;
    return {
      release() {
        if (released) return;
        released = true;
        try {
          if (readFileSync(file, 'utf8').trim() === String(pid)) rmSync(file, { force: true });
        } catch {
          // already gone
        }
      },
    };
  }
  const holder = Number.parseInt(readFileSync(file, 'utf8').trim(), 10);
  throw new DataDirLockedError(dir, holder);
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
