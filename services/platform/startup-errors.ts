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

const CONNECT_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);

type StartupError = NodeJS.ErrnoException & { port?: number; address?: string; hostname?: string; errors?: unknown[] };

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

/** A server named by DATABASE_URL, AMQP_URL or REDIS_URL that does not answer: the setting, never its password. */
function connectionFailureLine(e: StartupError, config: BaseConfig): string | null {
  // Node reports a refused connection to a name with several addresses as an AggregateError.
  const cause = !e?.code && Array.isArray(e?.errors) ? (e.errors[0] as StartupError) : e;
  if (!cause?.code || !CONNECT_CODES.has(cause.code)) return null;
  const host = cause.address ?? cause.hostname;
  const matches = SERVER_SETTINGS.flatMap(({ name, defaultPort }) => {
    const raw = config.env[name];
    if (!raw) return [];
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      return [];
    }
    const port = url.port ? Number(url.port) : defaultPort;
    const hostname = url.hostname.replace(/^\[|\]$/g, '');
    const samePort = cause.port === undefined || cause.port === port;
    const sameHost = host === undefined || host === hostname || cause.code === 'ECONNREFUSED';
    return samePort && sameHost ? [{ name, where: `${hostname}:${port}` }] : [];
  });
  if (matches.length !== 1) return null;
  const { name, where } = matches[0]!;
  return `cannot connect to ${where} (${name}): ${cause.code}; check that the server runs and that ${name} points at it`;
}
