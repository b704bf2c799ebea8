import { spawn } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { delimiter, isAbsolute, join } from 'node:path';
import type { Logger } from '../../kit/index.js';
import { cappedCollector } from './output.js';
import { PYTHON_FLAGS, discoverRuntimeFiles, type RuntimeFiles } from './runtime-files.js';
import { createRunSlots } from './slots.js';
import { SandboxUnavailableError, type PythonResult, type PythonRun, type SandboxDriver } from './types.js';

/**
 * python_exec on this host: CPython inside bubblewrap. The command line, outermost first:
 *
 *   setpriv --reuid U --regid U --clear-groups   drop root first: the kernel exempts root from RLIMIT_NPROC
 *   prlimit --nproc --as --cpu --fsize --nofile  limits, inherited by bwrap and everything inside
 *   bwrap --unshare-all --die-with-parent --new-session --clearenv
 *         --ro-bind <python runtime only> --tmpfs /tmp (size-limited) --proc --dev
 *         --ro-bind-data 3 /sandbox/main.py       the code arrives on fd 3, never through argv or env
 *   python3 -I -S -B -c <close fds above 2; exec>  a trusted prelude: the code never sees an inherited descriptor
 *   python3 -I -S -B /sandbox/main.py           isolated mode, no site-packages: the standard library only
 *
 * setpriv and prlimit exec into bwrap, so bwrap is this service's child; with --die-with-parent
 * it dies with the service (and the sandbox with it), even if the service is killed outright.
 * Each concurrent run has its own uid (SANDBOX_UID_BASE + slot), so one run's fork bomb spends
 * only its own process budget. The process is spawned with an empty environment: the sandbox's
 * PID 1 is a bwrap process whose /proc/1/environ the code can read, so the service's variables
 * must never reach it. Output is capped per stream; the whole process group is killed at the
 * timeout and when the caller goes away.
 */
export interface BwrapOptions {
  bwrapPath: string;
  pythonPath: string;
  uidBase: number;
  slots: number;
  memoryMb: number;
  maxProcesses: number;
  maxFileMb: number;
  tmpMb: number;
  outputLimitBytes: number;
  logger: Logger;
}

const SETPRIV = '/usr/bin/setpriv';
const PRLIMIT = '/usr/bin/prlimit';
/** The start-up check's own limit: generous, as a loaded host starts Python slowly. */
const PROBE_TIMEOUT_MS = 20_000;
/**
 * The trusted first program inside the sandbox: closes every descriptor above 2, then execs the
 * interpreter on the user's code (argv[1:]), which so starts with stdin, stdout and stderr only.
 * Node opens its own descriptors close-on-exec, but leaves most of those the service process inherited
 * without it (from a supervisor, a shell, a container runtime), and neither setpriv, prlimit nor
 * bwrap closes them: without this the code could read and write them through /proc/self/fd.
 * bwrap's own init (the sandbox's PID 1) closes its extra descriptors itself. The exec replaces
 * this program, so the user's program, its argv, tracebacks and line numbers are as if run
 * directly. Anything failing here (no /proc) exits non-zero before the code runs, and the
 * start-up check, which runs through the same command, then makes the tool unavailable.
 */
const CLOSE_INHERITED_FDS = [
  'import os, sys',
  'for fd in os.listdir("/proc/self/fd"):',
  '    if int(fd) > 2:',
  '        try:',
  '            os.close(int(fd))',
  '        except OSError:',
  '            pass',
  'os.execv(sys.argv[1], sys.argv[1:])',
].join('\n');


export async function createBwrapSandbox(options: BwrapOptions): Promise<SandboxDriver> {
  const slots = createRunSlots(options.slots);
  const bwrap = findExecutable(options.bwrapPath);
  const asRoot = process.getuid?.() === 0;
  let reason: string | null = null;
  let files: RuntimeFiles | null = null;
  if (!bwrap) reason = `bubblewrap (${options.bwrapPath}) is not installed; install the "bubblewrap" package`;
  else if (!findExecutable(PRLIMIT)) reason = `${PRLIMIT} (util-linux) is missing`;
  else if (asRoot && !findExecutable(SETPRIV)) reason = `${SETPRIV} (util-linux) is missing`;
  else {
    try {
      files = await discoverRuntimeFiles(options.pythonPath);
    } catch (error) {
      reason = `the Python runtime ${options.pythonPath} could not be inspected (${(error as Error).message.split('\n')[0]})`;
    }
  }

  function command(slot: number, timeoutMs: number): { file: string; args: string[] } {
    const rt = files!;
    const uid = String(options.uidBase + slot);
    const cpuSeconds = Math.ceil(timeoutMs / 1000) + 1;
    const mib = 1024 * 1024;
    const bwrapArgs = [
      '--unshare-all', '--unshare-user', '--disable-userns', '--die-with-parent', '--new-session', '--clearenv',
      '--hostname', 'sandbox',
      ...rt.symlinks.flatMap((link) => ['--symlink', link.target, link.path]),
      ...rt.dirs.flatMap((dir) => ['--ro-bind', dir, dir]),
      '--ro-bind', rt.python, rt.pythonPath,
      '--proc', '/proc', '--dev', '/dev', '--size', String(8 * mib), '--tmpfs', '/dev/shm',
      '--size', String(options.tmpMb * mib), '--tmpfs', '/tmp',
      '--dir', '/sandbox', '--ro-bind-data', '3', '/sandbox/main.py',
      // The root and /dev are tmpfs mounts of unlimited size: read-only, so the size-limited /tmp and /dev/shm are the only writable places.
      '--remount-ro', '/dev', '--remount-ro', '/',
      '--setenv', 'PATH', '/usr/bin', '--setenv', 'HOME', '/tmp', '--setenv', 'LANG', 'C.UTF-8',
      '--setenv', 'PYTHONIOENCODING', 'utf-8', '--chdir', '/tmp',
      '--', rt.pythonPath, ...PYTHON_FLAGS, '-c', CLOSE_INHERITED_FDS, rt.pythonPath, ...PYTHON_FLAGS, '/sandbox/main.py',
    ];
    const limits = [
      `--nproc=${options.maxProcesses}`, `--as=${options.memoryMb * mib}`, `--cpu=${cpuSeconds}`,
      `--fsize=${options.maxFileMb * mib}`, '--nofile=256', '--core=0',
    ];
    const inner = [PRLIMIT, ...limits, '--', bwrap!, ...bwrapArgs];
    if (!asRoot) return { file: inner[0]!, args: inner.slice(1) };
    return { file: SETPRIV, args: ['--reuid', uid, '--regid', uid, '--clear-groups', '--inh-caps=-all', '--bounding-set=-all', '--', ...inner] };
  }

  /**
   * One empty run at start: a bwrap that is installed but cannot build its sandbox here (no user
   * namespaces in the container, a seccomp profile refusing them) would otherwise answer every
   * call with a run that "failed" with bwrap's own complaint, while the tool reports itself available.
   */
  async function probe(): Promise<string | null> {
    try {
      const result = await runOnce(command(0, PROBE_TIMEOUT_MS), { code: 'pass', timeoutMs: PROBE_TIMEOUT_MS }, 4096);
      if (result.exit_code === 0) return null;
      if (result.timed_out) {
        options.logger.warn('the python_exec sandbox start-up check timed out (a loaded host?); runs are tried anyway');
        return null;
      }
      const said = result.stderr.trim().split('\n')[0]!.slice(0, 300);
      return `an empty program failed in the sandbox on this host (${said || `exit code ${result.exit_code}`})`;
    } catch (error) {
      return `the sandbox could not be started (${(error as Error).message.split('\n')[0]})`;
    }
  }
  if (!reason) reason = await probe();
  if (reason) options.logger.warn({ reason }, 'python_exec sandbox unavailable');
  else if (!asRoot) options.logger.warn('mcp-tools is not root: sandboxed runs share the service uid, so its process count limit includes the service');

  const running = new Set<AbortController>();
  return {
    name: 'bubblewrap',
    limits: { memoryMb: options.memoryMb, outputLimitBytes: options.outputLimitBytes },
    unavailableReason: () => reason,
    async run(input: PythonRun): Promise<PythonResult> {
      if (reason) throw new SandboxUnavailableError(reason);
      // A caller already gone starts nothing (an abort listener added now would never fire, and the run would hold its slot to the timeout).
      input.signal?.throwIfAborted();
      const slot = slots.take(input.userId);
      const stop = new AbortController();
      running.add(stop);
      try {
        const signal = input.signal ? AbortSignal.any([input.signal, stop.signal]) : stop.signal;
        return await runOnce(command(slot, input.timeoutMs), { ...input, signal }, options.outputLimitBytes);
      } finally {
        running.delete(stop);
        slots.give(input.userId, slot);
      }
    },
    /** Kills every run still in flight (the service is stopping). */
    async close() {
      for (const stop of running) stop.abort();
    },
  };
}

function runOnce(cmd: { file: string; args: string[] }, input: PythonRun, outputLimit: number): Promise<PythonResult> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const child = spawn(cmd.file, cmd.args, { env: {}, stdio: ['pipe', 'pipe', 'pipe', 'pipe'], detached: true });
    const stdout = cappedCollector(outputLimit);
    const stderr = cappedCollector(outputLimit);
    let timedOut = false;
    let flooded = false;
    const killGroup = () => {
      try {
        if (child.pid) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    };
    const timer = setTimeout(() => {
      timedOut = true;
      killGroup();
    }, input.timeoutMs);
    const onAbort = () => killGroup();
    input.signal?.addEventListener('abort', onAbort, { once: true });
    // Far past the cap the rest is noise; stop paying CPU for it.
    const floodLimit = outputLimit * 16;
    const watch = (collector: ReturnType<typeof cappedCollector>) => (chunk: Buffer) => {
      collector.push(chunk);
      if (collector.seen > floodLimit && !flooded) {
        flooded = true;
        killGroup();
      }
    };
    child.stdout!.on('data', watch(stdout));
    child.stderr!.on('data', watch(stderr));
    const codeStream = child.stdio[3] as NodeJS.WritableStream;
    for (const stream of [child.stdin!, codeStream]) stream.on('error', () => {}); // EPIPE when the child exits early
    codeStream.end(input.code);
    child.stdin!.end(input.stdin ?? '');
    child.on('error', (error) => {
      clearTimeout(timer);
      input.signal?.removeEventListener('abort', onAbort);
      reject(error);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      input.signal?.removeEventListener('abort', onAbort);
      const exitCode = code ?? 128 + signalNumber(signal);
      resolve({
        stdout: stdout.text(),
        stderr: stderr.text() + (timedOut ? `\n[killed: timed out after ${input.timeoutMs} ms]` : flooded ? '\n[killed: output far beyond the cap]' : ''),
        exit_code: exitCode,
        duration_ms: Math.round(performance.now() - started),
        timed_out: timedOut,
        truncated: stdout.truncated || stderr.truncated,
      });
    });
  });
}

const SIGNALS: Record<string, number> = { SIGKILL: 9, SIGTERM: 15, SIGXCPU: 24, SIGXFSZ: 25, SIGSEGV: 11, SIGABRT: 6 };
const signalNumber = (signal: NodeJS.Signals | null) => (signal ? SIGNALS[signal] ?? 1 : 0);

function findExecutable(name: string): string | null {
  const candidates = isAbsolute(name) ? [name] : (process.env.PATH ?? '/usr/bin:/bin').split(delimiter).map((dir) => join(dir, name));
  for (const candidate of candidates) {
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // next
    }
  }
  return null;
}
