import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import type { ExecutionContext } from 'ava';
import type { BaseConfig } from '../../services/kit/index.js';
import { waitFor } from './wait.js';
import { freePort, processRunning } from '../../scripts/free-port.mjs';

export { freePort };

/** True while a process with this pid exists. */
export const processAlive = processRunning;

/** A minimal environment: nothing of the test's own configuration leaks into a child process. */
export function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  // The edge's metrics listener would otherwise take GATEWAY_PORT + 100, a port no test claimed.
  return { PATH: process.env.PATH, HOME: process.env.HOME, EDGE_METRICS_PORT: '0', ...extra };
}

export interface Child {
  process: ChildProcess;
  stdout(): string;
  stderr(): string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export function startChild(command: string, args: string[], options: { env: NodeJS.ProcessEnv; cwd?: string }): Child {
  const child = spawn(command, args, { env: options.env, cwd: options.cwd ?? process.cwd(), stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout!.on('data', (c) => (out += c));
  child.stderr!.on('data', (c) => (err += c));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  return { process: child, stdout: () => out, stderr: () => err, exited };
}

/**
 * The environment of a gateway process that joins the test's stack: the same database schema, bus
 * exchange and queue prefix as `config`, plus `extra` (its own settings; they win).
 */
export function stackEnv(config: BaseConfig, extra: Record<string, string | undefined> = {}): NodeJS.ProcessEnv {
  return {
    PATH: process.env.PATH,
    NODE_ENV: 'test',
    LOG_LEVEL: 'info',
    DATABASE_URL: config.DATABASE_URL,
    DATABASE_SCHEMA: config.DATABASE_SCHEMA,
    AMQP_URL: config.AMQP_URL,
    BUS_EXCHANGE: config.BUS_EXCHANGE,
    BUS_QUEUE_PREFIX: config.BUS_QUEUE_PREFIX,
    ...extra,
  };
}

/**
 * The node arguments that run one of our TypeScript entry points (a service's or worker's
 * `main.ts`, a fixture): its JavaScript where `npm test` runs from the compiled copy of the
 * repository (TEST_TREE=compiled, scripts/test-tree.mjs), else the source through tsx: the way
 * ava.config.mjs runs the test files themselves.
 */
export function entryArgs(entry: string): string[] {
  return process.env.TEST_TREE === 'compiled' ? ['--enable-source-maps', entry.replace(/\.ts$/, '.js')] : ['--import', 'tsx', entry];
}

/** One of the gateway's own entry points (a service's or worker's `main.ts`) in a child process. */
export function startEntryPoint(entry: string, env: NodeJS.ProcessEnv): Child {
  return startChild(process.execPath, entryArgs(entry), { env });
}

/** The JSON log lines `child` has printed so far (other output skipped). */
export function jsonLogLines<T = Record<string, unknown>>(child: Child): T[] {
  return child
    .stdout()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as T);
}

/**
 * `waitFor(check)` while `child` runs: fails at once, with its output, if it exits first (instead
 * of waiting out the bound for a process that is gone).
 */
export async function waitWhileRunning<T>(
  child: Child,
  name: string,
  check: () => T | undefined | null | false | Promise<T | undefined | null | false>,
  boundMs: number,
  what: string,
  everyMs?: number,
): Promise<T> {
  const exitedEarly = child.exited.then(({ code, signal }) => {
    throw new Error(`${name} exited (${signal ?? code}) before ${what}: ${child.stderr().slice(-2000)}${child.stdout().slice(-2000)}`);
  });
  exitedEarly.catch(() => {});
  return Promise.race([waitFor(check, boundMs, what, everyMs), exitedEarly]);
}

/** Waits until `child` answers `${url}/healthz`; fails at once, with its output, if it exits first. */
export async function untilListening(child: Child, url: string, name: string): Promise<void> {
  await waitWhileRunning(child, name, () => fetch(`${url}/healthz`).then((r) => r.ok, () => false), 60_000, `${name} listening`);
}

export interface EdgeProcess {
  child: Child;
  url: string;
  port: number;
}

/**
 * The edge's own entry point (services/gateway/main.ts, as `npm run cluster` and a deployment
 * start it) in a child process on a free port, with every deck service at `upstream`; `env` adds
 * settings or overrides these. Resolves once it listens; killed when the test ends.
 */
export async function startEdgeProcess(t: ExecutionContext, upstream: string, env: Record<string, string> = {}): Promise<EdgeProcess> {
  const port = await freePort();
  const child = startEntryPoint('services/gateway/main.ts', {
    PATH: process.env.PATH,
    NODE_ENV: 'test',
    LOG_LEVEL: 'info',
    GATEWAY_PORT: String(port),
    EDGE_METRICS_PORT: '0',
    GATEWAY_SHARED_SECRET: randomBytes(24).toString('hex'),
    LLM_API_URL: upstream,
    RESPONSE_API_URL: upstream,
    MEDIA_API_URL: upstream,
    MCP_TOOLS_URL: upstream,
    ...env,
  });
  t.teardown(async () => {
    child.process.kill('SIGKILL');
    await child.exited;
  });
  const url = `http://127.0.0.1:${port}`;
  await untilListening(child, url, 'the edge');
  return { child, url, port };
}
