import { ConfigError, type BaseConfig } from '../kit/index.js';
import { DataDirLockedError } from './data-dir-lock.js';

const PORT_SETTINGS = ['GATEWAY_PORT', 'LLM_API_PORT', 'RESPONSE_API_PORT', 'MEDIA_API_PORT', 'MCP_TOOLS_PORT'] as const;

/**
 * The one line `npm start` prints for a failure the operator can fix (another platform on the same
 * data directory, a port taken), or null for anything else, which keeps its stack trace.
 */
export function startupFailureLine(error: unknown, config: BaseConfig): string | null {
  if (error instanceof DataDirLockedError || error instanceof ConfigError) return error.message;
  const e = error as NodeJS.ErrnoException & { port?: number; address?: string };
  if (e?.code === 'EADDRINUSE' || e?.code === 'EACCES') {
    const setting = PORT_SETTINGS.find((name) => config[name] === e.port);
    const where = `${e.address ?? config.HOST}:${e.port ?? '?'}`;
    const what = e.code === 'EADDRINUSE' ? 'is already in use' : 'may not be bound by this user';
    return `cannot listen on ${where}: the port ${what}${setting ? `; stop the other process or set ${setting}` : ''}`;
  }
  return null;
}
