import { spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import type { BaseConfig } from '../../services/kit/index.js';

/** A free TCP port on loopback (bound then released). */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** A minimal environment: nothing of the test's own configuration leaks into a child process. */
export function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  return { PATH: process.env.PATH, HOME: process.env.HOME, ...extra };
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

/** One of the gateway's own entry points (a service's or worker's `main.ts`) in a child process, through tsx. */
export function startEntryPoint(entry: string, env: NodeJS.ProcessEnv): Child {
  return startChild(process.execPath, ['--import', 'tsx', entry], { env });
}
