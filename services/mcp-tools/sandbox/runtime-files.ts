import { execFile } from 'node:child_process';
import { existsSync, lstatSync, readlinkSync, realpathSync, statSync } from 'node:fs';
import { dirname, isAbsolute, join, sep } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/**
 * What the sandbox may see of the host: the Python interpreter, its module directories and the
 * shared libraries it links against, all read-only. Nothing else of the host file system (no
 * /etc, /home, /root, /work, DATA_DIR, /usr/local/bin, …) exists inside.
 */
export interface RuntimeFiles {
  /** The interpreter's real file, bound at `pythonPath`. */
  python: string;
  pythonPath: string;
  /** Host directories bound read-only at the same place. */
  dirs: string[];
  /** Top-level symlinks of the host (merged /usr: /lib -> usr/lib) recreated inside. */
  symlinks: Array<{ target: string; path: string }>;
}

/**
 * How the interpreter runs, in the probe and in the sandbox: isolated (no PYTHON* variables, no
 * user site), without `site` (no site-packages: the standard library only; it also halves start-up),
 * without writing bytecode.
 */
export const PYTHON_FLAGS = ['-I', '-S', '-B'];

const PROBE = 'import json, os, sys; print(json.dumps({"exe": os.path.realpath(sys.executable), "paths": [p for p in sys.path if p]}))';

export async function discoverRuntimeFiles(pythonPath: string): Promise<RuntimeFiles> {
  if (!isAbsolute(pythonPath)) throw new Error(`SANDBOX_PYTHON must be an absolute path (got ${pythonPath})`);
  // The probe runs the configured interpreter with no environment and isolated mode: it only prints paths.
  const probe = await run(pythonPath, [...PYTHON_FLAGS, '-c', PROBE], { env: {}, timeout: 10_000 });
  const { exe, paths } = JSON.parse(probe.stdout) as { exe: string; paths: string[] };
  const libraries = await sharedLibraries(exe);
  const dirs = new Set<string>();
  for (const path of paths) if (isDir(path)) dirs.add(realpathSync(path));
  for (const lib of libraries) {
    dirs.add(realpathSync(dirname(lib)));
    dirs.add(dirname(realpathSync(lib)));
  }
  const symlinks: RuntimeFiles['symlinks'] = [];
  for (const top of new Set([...dirs, ...libraries, pythonPath].map((p) => `${sep}${p.split(sep)[1]}`))) {
    if (lstatSync(top, { throwIfNoEntry: false })?.isSymbolicLink()) symlinks.push({ path: top, target: readlinkSync(top) });
  }
  return { python: exe, pythonPath, dirs: withoutNested([...dirs]), symlinks };
}

/** Paths of the shared objects `exe` loads, as `ldd` prints them (the loader included). */
async function sharedLibraries(exe: string): Promise<string[]> {
  const { stdout } = await run('ldd', [exe], { env: {}, timeout: 10_000 });
  const found: string[] = [];
  for (const line of stdout.split('\n')) {
    const match = /(?:=>\s*)?(\/\S+)\s+\(0x/.exec(line);
    if (match && existsSync(match[1]!)) found.push(match[1]!);
  }
  return found;
}

function isDir(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

function withoutNested(dirs: string[]): string[] {
  const sorted = [...new Set(dirs)].sort();
  return sorted.filter((dir) => !sorted.some((other) => other !== dir && dir.startsWith(join(other, sep))));
}
