import { z } from 'zod';

/** The recent-requests log (README.md "LLM API" table). */
export const requestLogConfigShape = {
  /** Rows older than this are removed. */
  REQUEST_LOG_RETENTION_HOURS: z.coerce.number().int().min(1).max(24 * 90).default(24),
  /** At most this many rows are kept (the newest); 0 turns the log off. */
  REQUEST_LOG_MAX_ROWS: z.coerce.number().int().min(0).max(100_000_000).default(100_000),
  /** Rows are written in batches at this interval (and when 500 are waiting). */
  REQUEST_LOG_FLUSH_MS: z.coerce.number().int().min(1).default(1000),
};
