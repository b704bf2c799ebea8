import cluster, { type Worker } from 'node:cluster';
import { randomBytes } from 'node:crypto';
import { availableParallelism } from 'node:os';
import { z } from 'zod';
import { loadConfig, serveMetricsGroup, type BaseConfig, type Logger } from '../kit/index.js';

/**
 * `PLATFORM_PROCESSES`: how many copies of the all-in-one platform share its ports (Node's
 * `cluster`), so one start uses more than one core, as Kong runs one nginx worker per core. Each
 * copy is the whole platform (edge, services, workers) with its own event loop and its own
 * descriptor limit; the edge still dispatches in process to the services of its own copy. Every
 * copy is one more node of a multi-node deployment, so the state they share must live outside
 * them: PostgreSQL, Redis, and the bus (RabbitMQ or the PostgreSQL queue).
 */
export const processesShape = {
  /** A count (1–64) or `auto` (one per core the process may use). */
  PLATFORM_PROCESSES: z
    .string()
    .default('1')
    .transform((v, ctx) => {
      const value = v.trim();
      if (value === 'auto') return availableParallelism();
      if (/^\d+$/.test(value) && Number(value) >= 1 && Number(value) <= 64) return Number(value);
      ctx.addIssue({ code: 'custom', message: 'must be a whole number from 1 to 64, or auto' });
      return z.NEVER;
    }),
};

export function platformProcesses(config: BaseConfig): number {
  return loadConfig(processesShape, config.env as NodeJS.ProcessEnv).PLATFORM_PROCESSES;
}

/**
 * Why several copies cannot start with this configuration, one line each (empty: they can). The
 * embedded database's data directory belongs to one process; without Redis each copy would count
 * rate limits alone (N times the limit) and miss the others' user revocations until its cache expired.
 */
export function processesRefusals(config: BaseConfig, count: number): string[] {
  if (count <= 1) return [];
  const lines: string[] = [];
  if (!config.DATABASE_URL) lines.push(`refusing to start: PLATFORM_PROCESSES=${count} with the embedded PGlite database (its data directory belongs to one process); set DATABASE_URL to a PostgreSQL server`);
  if (!config.REDIS_URL) lines.push(`refusing to start: PLATFORM_PROCESSES=${count} without REDIS_URL (each process would count rate limits alone and miss the others' user revocations); set REDIS_URL`);
  return lines;
}

/** The messages between the supervising process and a copy, over the cluster's IPC channel. */
type PlatformMessage = { platform: 'ready' } | { platform: 'stop' };
const isPlatformMessage = (m: unknown): m is PlatformMessage => typeof m === 'object' && m !== null && 'platform' in m;

/** True in a copy started by `superviseProcesses`. */
export const isSupervisedCopy = (): boolean => cluster.isWorker;

/**
 * In a copy, once its platform serves: tells the supervisor, and stops when the supervisor asks or
 * goes away (an orphaned copy would hold the ports with nobody to stop it).
 */
export function reportToSupervisor(stop: (reason: string) => void): void {
  process.on('message', (message: unknown) => {
    if (isPlatformMessage(message) && message.platform === 'stop') stop('supervisor');
  });
  process.once('disconnect', () => stop('supervisor gone'));
  process.send?.({ platform: 'ready' } satisfies PlatformMessage);
}

export interface SupervisorOptions {
  count: number;
  config: BaseConfig;
  logger: Logger;
  /** The module each copy runs (the platform's entry point; not `npm start`'s script, which builds). */
  entry: string;
  /** Called once every copy serves, with their process ids. */
  onReady(pids: number[]): void;
  /** A copy that served this long before it exited is restarted at once; sooner, after a growing delay. */
  stableAfterMs?: number;
  /** The first of those delays (1 s); each further quick exit doubles it, up to 30 s. */
  backoffBaseMs?: number;
}

/**
 * The supervising process of `PLATFORM_PROCESSES` > 1. It serves nothing itself: Node's cluster
 * hands each new connection to the copies in turn. It starts one copy first (its migrations and the
 * bootstrap key then exist once), then the others together. A copy that fails before it serves
 * stops the start (exit 1; its own output says why). After that, a copy that exits is replaced:
 * at once if it had served `stableAfterMs`, otherwise after 1, 2, 4 … 30 s, so a copy that
 * crashes as it starts does not spin. A replacement that fails before it serves (the database
 * briefly unreachable, say) counts as one more quick exit and is tried again, for as long as the
 * supervisor runs: it never settles for fewer copies than it was asked for. SIGTERM / SIGINT:
 * every copy drains and stops as a single process would; the supervisor exits 0 when all exited 0.
 * A second signal kills them (exit 1).
 */
export async function superviseProcesses(options: SupervisorOptions): Promise<void> {
  const { count, config, logger } = options;
  const stableAfterMs = options.stableAfterMs ?? 30_000;
  const backoffBaseMs = options.backoffBaseMs ?? 1000;
  // The gateway secret proves to a service that a request passed the edge; the copies share one,
  // or a connection could reach a service under a secret its own edge never set. Generated here,
  // it lives only in these processes' environment, as the single process keeps it in memory.
  const env: Record<string, string> = {};
  if (!config.GATEWAY_SHARED_SECRET) env.GATEWAY_SHARED_SECRET = randomBytes(32).toString('base64url');
  cluster.setupPrimary({ exec: options.entry });

  let stopping = false;
  let quickExits = 0;
  const live = new Set<Worker>();
  const serving = new WeakSet<Worker>();
  // A scrape reaches one copy; the supervisor gathers every copy's series for it (kit/http/metrics-group.ts).
  serveMetricsGroup(() => live);

  /**
   * Starts a copy. `initial`: one of the copies the start waits for, whose failure before it serves
   * stops the start (the promise rejects). Otherwise it replaces one that exited, and a failure
   * before it serves is one more quick exit: another replacement follows, later each time.
   */
  const fork = (initial: boolean): Promise<Worker> =>
    new Promise((resolve, reject) => {
      const worker = cluster.fork(env);
      live.add(worker);
      const startedAt = Date.now();
      let ready = false;
      worker.on('message', (message: unknown) => {
        if (!isPlatformMessage(message) || message.platform !== 'ready' || ready) return;
        ready = true;
        serving.add(worker);
        resolve(worker);
      });
      worker.once('exit', (code, signal) => {
        live.delete(worker);
        if (!ready) reject(new Error(`a platform process exited before it served (${signal ?? `code ${code}`})`));
        if (stopping || (initial && !ready)) return;
        replace(worker, ready ? Date.now() - startedAt : 0, code, signal);
      });
    });

  /**
   * Starts another copy in place of `gone`, which served `servedMs` (0: it never served). The timer
   * is not unref'd: with every copy gone it is all that keeps the supervisor, and the ports, alive.
   */
  const replace = (gone: Worker, servedMs: number, code: number | null, signal: string | null) => {
    quickExits = servedMs >= stableAfterMs ? 0 : quickExits + 1;
    const delayMs = quickExits <= 1 ? 0 : Math.min(30_000, backoffBaseMs * 2 ** (quickExits - 2));
    const pid = gone.process.pid;
    const msg = servedMs > 0 ? 'platform process exited; starting another' : 'platform process exited before it served; starting another';
    logger.error({ pid, code, signal, restart_in_ms: delayMs }, msg);
    setTimeout(() => {
      if (stopping) return;
      fork(false).then(
        (next) => logger.info({ pid: next.process.pid, replaces: pid }, 'platform process restarted'),
        // Its own exit handler has already scheduled the next try.
        () => {},
      );
    }, delayMs);
  };

  const exit = (code: number): never => {
    logger.flush?.();
    process.exit(code);
  };
  /** Drains every copy (`exitCode` undefined) or kills them and exits with `exitCode`. */
  const stopAll = (exitCode: number | undefined) => {
    stopping = true;
    if (exitCode !== undefined) {
      for (const worker of live) worker.process.kill('SIGKILL');
      exit(exitCode);
    }
    if (live.size === 0) exit(0);
    let failed = false;
    for (const worker of live) {
      worker.once('exit', (code) => {
        failed ||= code !== 0;
        if (live.size === 0) exit(failed ? 1 : 0);
      });
      // A serving copy is asked over IPC: with Ctrl-C it has the terminal's SIGINT too, and a
      // second signal would cut its drain short; the request is not a signal, so both make one
      // stop. A copy still starting has no listener yet: it keeps a signal for once it serves.
      if (serving.has(worker) && worker.isConnected()) worker.send({ platform: 'stop' } satisfies PlatformMessage);
      else worker.process.kill('SIGTERM');
    }
  };
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.on(signal, () => {
      if (stopping) {
        logger.warn({ signal }, 'second signal: killing the platform processes');
        return stopAll(1);
      }
      logger.info({ signal, processes: live.size }, 'stopping the platform processes');
      stopAll(undefined);
    });
  }

  try {
    const first = await fork(true);
    const rest = await Promise.all(Array.from({ length: count - 1 }, () => fork(true)));
    if (!stopping) options.onReady([first, ...rest].map((w) => w.process.pid!));
  } catch (error) {
    // A copy stopped by a signal during the start exits before it serves: that stop decides the exit code.
    if (stopping) return;
    logger.error({ err: (error as Error).message }, 'the platform did not start');
    stopAll(1);
  }
}
