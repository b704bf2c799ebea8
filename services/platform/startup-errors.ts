import { isAbsolute, normalize, resolve, sep } from 'node:path';
import { ConfigError, type BaseConfig } from '../kit/index.js';
import { DeckError } from '../gateway/service.js';
import { DataDirLockedError } from './data-dir-lock.js';

const PORT_SETTINGS = ['GATEWAY_PORT', 'LLM_API_PORT', 'RESPONSE_API_PORT', 'MEDIA_API_PORT', 'MCP_TOOLS_PORT'] as const;

/** The servers the platform connects to at start, with each URL scheme's default port. */
const SERVER_SETTINGS = [
  { name: 'DATABASE_URL', defaultPort: 5432 },
  { name: 'AMQP_URL', defaultPort: 5672 },
  { name: 'REDIS_URL', defaultPort: 6379 },
] as const;

/** `EAUTH`: the server answered and refused the URL's credentials (services/gateway/deps.ts, checkRedisAnswers; services/kit/bus/amqp.ts, a refused AMQP login). */
const CONNECT_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'EAUTH']);

type StartupError = NodeJS.ErrnoException & { port?: number; address?: string; hostname?: string; errors?: unknown[]; reply?: string };

/**
 * The one line `npm start` (and a service or worker started alone) prints for a failure the
 * operator can fix (a bad setting, another platform on the same data directory, a port taken, a
 * server that does not answer), or null for anything else, which keeps its stack trace.
 */
export function startupFailureLine(error: unknown, config: BaseConfig): string | null {
  if (error instanceof DataDirLockedError || error instanceof ConfigError) return error.message;
  if (error instanceof DeckError) return `cannot start the edge: ${error.message}; fix the deck file (EDGE_DECK_FILE) or the DECK_* setting it names`;
  const e = error as StartupError;
  if ((e?.code === 'EADDRINUSE' || e?.code === 'EACCES') && (e.code === 'EADDRINUSE' || e.syscall === 'listen' || e.syscall === 'bind')) {
    const setting = PORT_SETTINGS.find((name) => config[name] === e.port);
    const where = `${e.address ?? config.HOST}:${e.port ?? '?'}`;
    const what = e.code === 'EADDRINUSE' ? 'is already in use' : 'may not be bound by this user';
    return `cannot listen on ${where}: the port ${what}${setting ? `; stop the other process or set ${setting}` : ''}`;
  }
  if ((e?.code === 'EACCES' || e?.code === 'EPERM' || e?.code === 'EROFS') && typeof e.path === 'string' && isUnder(e.path, config.DATA_DIR)) {
    return `cannot write ${e.path}: permission denied (${e.code}); make DATA_DIR (${config.DATA_DIR}) writable by this user or set DATA_DIR`;
  }
  if (e?.code === 'ENOENT' && typeof e.path === 'string' && isDeckFile(e.path, config)) {
    return `cannot read the deck file ${e.path}: no such file; set EDGE_DECK_FILE to an existing decK file`;
  }
  return connectionFailureLine(e, config);
}

function isUnder(path: string, dir: string): boolean {
  const root = resolve(dir);
  const full = resolve(path);
  return full === root || full.startsWith(`${root}/`);
}

/** The edge reads a relative EDGE_DECK_FILE from the working directory or the repository root. */
function isDeckFile(path: string, config: BaseConfig): boolean {
  const file = config.env.EDGE_DECK_FILE;
  if (!file) return false;
  return isAbsolute(file) ? resolve(path) === resolve(file) : resolve(path).endsWith(`${sep}${normalize(file)}`);
}

/** What each connection error code means, for the line. */
const REASONS: Record<string, string> = {
  ECONNREFUSED: 'connection refused',
  ECONNRESET: 'connection reset',
  EPIPE: 'connection closed by the server',
  ETIMEDOUT: 'timed out',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
  ENOTFOUND: 'host name not found',
  EAI_AGAIN: 'host name lookup failed',
};

/**
 * A server named by DATABASE_URL, AMQP_URL or REDIS_URL that does not answer: the setting, its URL
 * with the password replaced, and what failed (refused, timed out, …).
 */
function connectionFailureLine(e: StartupError, config: BaseConfig): string | null {
  if (isDatabaseConnectTimeout(e) && config.DATABASE_URL) {
    const target = serverTarget('DATABASE_URL', 5432, config);
    if (!target) return null;
    return serverLine(target, `timed out (no connection within DATABASE_CONNECT_TIMEOUT_MS, ${config.DATABASE_CONNECT_TIMEOUT_MS} ms)`);
  }
  // Node reports a refused connection to a name with several addresses as an AggregateError.
  const cause = !e?.code && Array.isArray(e?.errors) ? (e.errors[0] as StartupError) : e;
  if (!cause?.code || !CONNECT_CODES.has(cause.code)) return null;
  const host = cause.address ?? cause.hostname;
  const matches = SERVER_SETTINGS.flatMap(({ name, defaultPort }) => {
    const target = serverTarget(name, defaultPort, config);
    if (!target) return [];
    const samePort = cause.port === undefined || cause.port === target.port;
    const sameHost = host === undefined || host === target.hostname || cause.code === 'ECONNREFUSED';
    return samePort && sameHost ? [target] : [];
  });
  if (matches.length !== 1) return null;
  if (cause.code === 'EAUTH') {
    const { name } = matches[0]!;
    return serverLine(matches[0]!, `authentication refused (${cause.reply ?? cause.code})`, `check the user name and password in ${name}`);
  }
  return serverLine(matches[0]!, `${REASONS[cause.code]} (${cause.code})`);
}

interface ServerTarget {
  name: string;
  hostname: string;
  port: number;
  /** The setting's URL without its password or query (which may hold credentials too). */
  shown: string;
}

function serverTarget(name: string, defaultPort: number, config: BaseConfig): ServerTarget | null {
  const raw = config.env[name];
  if (!raw) return null;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return null;
  }
  const hostname = url.hostname.replace(/^\[|\]$/g, '');
  const port = url.port ? Number(url.port) : defaultPort;
  const credentials = url.username || url.password ? `${url.username}${url.password ? ':***' : ''}@` : '';
  return { name, hostname, port, shown: `${url.protocol}//${credentials}${url.host}${url.pathname === '/' ? '' : url.pathname}` };
}

function serverLine({ name, hostname, port, shown }: ServerTarget, what: string, advice = `check that the server runs and that ${name} points at it`): string {
  return `cannot connect to ${hostname}:${port} (${name}=${shown}): ${what}; ${advice}`;
}

/**
 * The pool's wait for a first connection ran out (a PostgreSQL server that accepts and never
 * answers): knex's KnexTimeoutError, which carries no socket code. At start nothing else holds the
 * pool, so it means the server at DATABASE_URL did not answer in time.
 */
function isDatabaseConnectTimeout(e: StartupError): boolean {
  return e?.name === 'KnexTimeoutError' && /acquiring a connection/i.test(e.message ?? '');
}
