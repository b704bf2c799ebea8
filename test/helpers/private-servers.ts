import { execFile, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chownSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import amqp from 'amqplib';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort, processAlive, startChild, type Child } from './process.js';
import { waitFor } from './wait.js';

/**
 * Servers of the test's own, for tests that stop and start a real PostgreSQL or Redis: the shared
 * servers on this machine serve other runs and must never be restarted. Each lives in a temporary
 * directory on a free loopback port and comes back on the same port after `stop()` and `start()`,
 * as a restarted production server would. `dispose()` (call it from `after.always`) stops it and
 * removes the directory; a process that exits without calling it still kills the server, so no
 * server outlives a crashed test.
 */
export interface PrivateServer {
  port: number;
  url: string;
  /** Whether the server is up (as far as this helper started and stopped it). */
  running(): boolean;
  start(): Promise<void>;
  dispose(): Promise<void>;
}

export interface PrivatePostgres extends PrivateServer {
  /** `fast` disconnects clients and shuts down cleanly; `immediate` is a crash (recovery on start). */
  stop(mode?: 'fast' | 'immediate'): Promise<void>;
  /** The server's log (for a failing test's diagnostics). */
  log(): string;
}

export interface PrivateRedis extends PrivateServer {
  /** SIGTERM: Redis shuts down without saving (`--save ''`); SIGKILL: a crash. Either loses every key. */
  stop(signal?: 'SIGTERM' | 'SIGKILL'): Promise<void>;
}

export interface PrivateRabbitMQ extends PrivateServer {
  /** SIGTERM: the node stops cleanly (durable queues and persistent messages kept); SIGKILL: a crash. */
  stop(signal?: 'SIGTERM' | 'SIGKILL'): Promise<void>;
}

const run = promisify(execFile);
const PG_OWNER = 'postgres';

function ownerIds(user: string): { uid: number; gid: number } {
  return {
    uid: Number(spawnSync('id', ['-u', user], { encoding: 'utf8' }).stdout.trim()),
    gid: Number(spawnSync('id', ['-g', user], { encoding: 'utf8' }).stdout.trim()),
  };
}

function postgresBin(): string {
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root) ? readdirSync(root).filter((v) => existsSync(join(root, v, 'bin', 'pg_ctl'))) : [];
  if (versions.length === 0) throw new Error(`no PostgreSQL binaries under ${root}`);
  const newest = versions.sort((a, b) => Number(b) - Number(a))[0]!;
  return join(root, newest, 'bin');
}

/**
 * Runs `kill` and removes `dir`, once: when the returned function is called (from `dispose`), or
 * when this process exits without that, so no server outlives a crashed test. `kill` must be
 * synchronous: an `exit` handler cannot wait.
 */
function killAtExit(dir: string, kill: () => void): () => void {
  let done = false;
  const killNow = () => {
    if (done) return;
    done = true;
    kill();
    rmSync(dir, { recursive: true, force: true });
  };
  process.once('exit', killNow);
  return () => {
    process.removeListener('exit', killNow);
    killNow();
  };
}

/** `server` once `prepare` (if any) and its first start succeeded; disposed if either fails. */
async function startedOrDisposed<S extends PrivateServer>(server: S, prepare?: () => Promise<unknown>): Promise<S> {
  try {
    await prepare?.();
    await server.start();
  } catch (error) {
    await server.dispose();
    throw error;
  }
  return server;
}

/** A PostgreSQL cluster of the test's own: trust authentication, fsync off, database `postgres`. */
export async function startPrivatePostgres(): Promise<PrivatePostgres> {
  const bin = postgresBin();
  const dir = mkdtempSync(join(tmpdir(), 'private-pg-'));
  const data = join(dir, 'data');
  const logFile = join(dir, 'server.log');
  const port = await freePort();
  // PostgreSQL refuses to run as root: as root, the binaries run as `postgres` (owning the
  // directory); as anyone else, as that user.
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const { uid, gid } = ownerIds(PG_OWNER);
    chownSync(dir, uid, gid);
  }
  const command = (name: string, args: string[]): [string, string[]] =>
    asRoot ? ['runuser', ['-u', PG_OWNER, '--', join(bin, name), ...args]] : [join(bin, name), args];
  const asOwner = (name: string, args: string[]) => run(...command(name, args), { timeout: 60_000 });
  const ctl = (...args: string[]) => asOwner('pg_ctl', ['-D', data, ...args]);
  let up = false;
  const killNow = killAtExit(dir, () => {
    if (up) spawnSync(...command('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop']), { timeout: 30_000 });
    up = false;
  });

  const server: PrivatePostgres = {
    port,
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    running: () => up,
    async start() {
      // -F: no fsync (a test cluster need not survive a power cut); the socket lives in the temp dir.
      // Counted as up before pg_ctl returns: a start that times out may still leave a server to kill.
      up = true;
      await ctl('-l', logFile, '-w', '-t', '60', '-o', `-p ${port} -h 127.0.0.1 -k ${dir} -F`, 'start');
    },
    async stop(mode = 'fast') {
      await ctl('-m', mode, '-w', '-t', '60', 'stop');
      up = false;
    },
    log: () => spawnSync('cat', [logFile], { encoding: 'utf8' }).stdout ?? '',
    async dispose() {
      killNow();
    },
  };
  return startedOrDisposed(server, () => asOwner('initdb', ['-D', data, '-A', 'trust', '-U', PG_OWNER, '-E', 'UTF8', '--no-sync']));
}

/** A Redis of the test's own: no persistence, so a restart starts empty (as a cache without a disk would). */
export async function startPrivateRedis(): Promise<PrivateRedis> {
  const dir = mkdtempSync(join(tmpdir(), 'private-redis-'));
  const port = await freePort();
  let child: Child | undefined;
  const killNow = killAtExit(dir, () => child?.process.kill('SIGKILL'));

  const server: PrivateRedis = {
    port,
    url: `redis://127.0.0.1:${port}`,
    running: () => child !== undefined,
    async start() {
      const started = startChild('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--daemonize', 'no'], {
        env: { PATH: process.env.PATH },
        cwd: dir,
      });
      child = started;
      let exited = false;
      void started.exited.then(() => (exited = true));
      // Redis prints this line once it listens; the helper knows no other readiness event.
      await waitFor(() => {
        if (exited) throw new Error(`redis-server exited before it was ready: ${started.stdout().slice(-500)}`);
        return started.stdout().includes('Ready to accept connections');
      }, 30_000, 'private redis-server ready');
    },
    async stop(signal = 'SIGTERM') {
      const current = child;
      if (!current) return;
      child = undefined;
      current.process.kill(signal);
      await current.exited;
    },
    async dispose() {
      await server.stop('SIGKILL');
      killNow();
    },
  };
  return startedOrDisposed(server);
}

/**
 * A RabbitMQ node of the test's own (no plugins, its own node name, AMQP and distribution ports,
 * data and logs in a temporary directory). `rabbitmq-server` runs the node as the `rabbitmq` user.
 * Booting takes 5-15 s on a busy machine; ready means an AMQP connection succeeds.
 */
export async function startPrivateRabbitMQ(): Promise<PrivateRabbitMQ> {
  const dir = mkdtempSync(join(tmpdir(), 'private-rabbitmq-'));
  writeFileSync(join(dir, 'enabled_plugins'), '[].');
  const { uid, gid } = ownerIds('rabbitmq');
  chownSync(dir, uid, gid);
  chownSync(join(dir, 'enabled_plugins'), uid, gid);
  const port = await freePort();
  const distPort = await freePort();
  const url = `amqp://guest:guest@127.0.0.1:${port}`;
  const pidFile = join(dir, 'node.pid');
  const env = {
    PATH: process.env.PATH,
    RABBITMQ_NODENAME: `test-${process.pid}-${randomBytes(3).toString('hex')}@localhost`,
    RABBITMQ_NODE_IP_ADDRESS: '127.0.0.1',
    RABBITMQ_NODE_PORT: String(port),
    RABBITMQ_DIST_PORT: String(distPort),
    RABBITMQ_MNESIA_BASE: join(dir, 'mnesia'),
    RABBITMQ_LOG_BASE: join(dir, 'log'),
    RABBITMQ_ENABLED_PLUGINS_FILE: join(dir, 'enabled_plugins'),
    RABBITMQ_PID_FILE: pidFile,
    // No configuration file of the machine's: this node runs on defaults.
    RABBITMQ_CONFIG_FILE: join(dir, 'rabbitmq'),
    RABBITMQ_ADVANCED_CONFIG_FILE: join(dir, 'advanced.config'),
  };
  let child: Child | undefined;
  const nodePid = (): number | undefined => {
    try {
      return Number(readFileSync(pidFile, 'utf8').trim()) || undefined;
    } catch {
      return undefined;
    }
  };
  const killNow = killAtExit(dir, () => {
    const pid = nodePid();
    if (pid && processAlive(pid)) process.kill(pid, 'SIGKILL');
    child?.process.kill('SIGKILL');
  });

  const server: PrivateRabbitMQ = {
    port,
    url,
    running: () => child !== undefined,
    async start() {
      rmSync(pidFile, { force: true });
      const started = startChild('rabbitmq-server', [], { env, cwd: dir });
      child = started;
      let exited = false;
      void started.exited.then(() => (exited = true));
      await waitFor(async () => {
        if (exited) throw new Error(`rabbitmq-server exited before it was ready: ${started.stdout().slice(-800)}`);
        const connection = await amqp.connect(url).catch(() => undefined);
        await connection?.close().catch(() => {});
        return connection !== undefined;
      }, 60_000, 'private RabbitMQ node ready', 250);
    },
    async stop(signal = 'SIGTERM') {
      const current = child;
      if (!current) return;
      child = undefined;
      const pid = nodePid();
      if (pid && processAlive(pid)) {
        process.kill(pid, signal);
        await waitFor(() => !processAlive(pid), 60_000, 'private RabbitMQ node stopped', 100);
      }
      await current.exited;
    },
    async dispose() {
      await server.stop('SIGKILL').catch(() => {});
      killNow();
    },
  };
  return startedOrDisposed(server);
}
