import { z } from 'zod';
import { loadConfig } from '../kit/core/index.js';
import { optionalUrl } from '../kit/settings/index.js';

/**
 * Settings of mcp-tools only (README.md "MCP tools" table documents each). Parsed once at start
 * from the environment the platform was configured from: `loadMcpConfig(ctx.runtime.config.env)`.
 */
const int = (min: number, max: number, fallback: number) => z.coerce.number().int().min(min).max(max).default(fallback);
const size = z.string().regex(/^\d+(b|kb|mb)$/i, 'a size such as 2mb');

export const mcpConfigShape = {
  /** Tool calls in flight per process; past it a call answers "busy, retry" instead of queueing. */
  MCP_MAX_CONCURRENT_CALLS: int(1, 10_000, 64),
  /** python_exec runs in flight per process (each is a sandboxed CPython process). */
  MCP_MAX_CONCURRENT_PYTHON: int(1, 256, 4),
  /** How often a process re-reads the enabled/disabled state of the tools shared by all processes. */
  MCP_TOOL_STATE_REFRESH_MS: int(100, 600_000, 2000),
  /** How often a tool call whose client asked for progress (a `progressToken`) sends a progress notification. */
  MCP_PROGRESS_INTERVAL_MS: int(10, 600_000, 10_000),
  /** Largest JSON-RPC request body on /v1/mcp (file_search_index carries whole documents). */
  MCP_BODY_LIMIT: size.default('4mb'),

  // google_search backends: Serper when its key is set, else SearXNG when its URL is set.
  SERPER_API_KEY: z.string().min(1).optional(),
  SERPER_URL: z.string().url().default('https://google.serper.dev'),
  SEARXNG_URL: optionalUrl,
  SEARCH_TIMEOUT_MS: int(100, 120_000, 10_000),

  SCRAPE_TIMEOUT_MS: int(100, 120_000, 15_000),
  /** Responses larger than this are cut off while streaming (never buffered whole). */
  SCRAPE_MAX_BYTES: size.default('5mb'),
  /** `max_chars` when the caller gives none. */
  SCRAPE_DEFAULT_MAX_CHARS: int(100, 1_000_000, 20_000),

  FILE_SEARCH_CHUNK_CHARS: int(200, 20_000, 1200),
  FILE_SEARCH_CHUNK_OVERLAP: int(0, 5_000, 200),
  FILE_SEARCH_MAX_DOCUMENT_CHARS: int(1, 50_000_000, 1_000_000),
  /** Documents one user may keep indexed; re-indexing one of them (same document_id) always works. */
  FILE_SEARCH_MAX_DOCUMENTS_PER_USER: int(1, 1_000_000, 1000),
  /** OpenAI-compatible embeddings endpoint (base URL, `/embeddings` is appended); unset: full-text search only. */
  EMBEDDINGS_URL: optionalUrl,
  EMBEDDINGS_MODEL: z.string().min(1).default('text-embedding-3-small'),
  EMBEDDINGS_API_KEY: z.string().min(1).optional(),
  EMBEDDINGS_TIMEOUT_MS: int(100, 120_000, 15_000),

  /** SandboxFusion-compatible `run_code` service; when set, python_exec runs there instead of bubblewrap. */
  SANDBOX_URL: optionalUrl,
  SANDBOX_BWRAP_PATH: z.string().min(1).default('bwrap'),
  SANDBOX_PYTHON: z.string().min(1).default('/usr/bin/python3'),
  /** Each concurrent run gets its own unprivileged uid: base, base+1, … (never 0). */
  SANDBOX_UID_BASE: int(1000, 4_000_000_000, 60_000),
  SANDBOX_MEMORY_MB: int(32, 65_536, 512),
  SANDBOX_MAX_PROCESSES: int(1, 4096, 32),
  SANDBOX_MAX_FILE_MB: int(1, 65_536, 16),
  SANDBOX_TMP_MB: int(1, 65_536, 64),
  SANDBOX_OUTPUT_LIMIT_BYTES: int(1024, 16 * 1024 * 1024, 64 * 1024),
};

export type McpConfig = z.infer<z.ZodObject<typeof mcpConfigShape>>;

/** The most a python_exec call may ask for as its `timeout_ms`. */
export const PYTHON_MAX_TIMEOUT_MS = 60_000;

/**
 * About the longest one tool call runs here: the largest of its own limits (python_exec's run with
 * the remote sandbox's round trip, scrape's fetch then its reading of the page, one search or
 * embeddings request). A cancel kept longer than this names a call that has ended (an index of many
 * embedding batches can run longer; it still ends when its client goes away).
 */
export function longestToolCallMs(config: Pick<McpConfig, 'SCRAPE_TIMEOUT_MS' | 'SEARCH_TIMEOUT_MS' | 'EMBEDDINGS_TIMEOUT_MS'>): number {
  return Math.max(PYTHON_MAX_TIMEOUT_MS + 5_000, 2 * config.SCRAPE_TIMEOUT_MS, config.SEARCH_TIMEOUT_MS, config.EMBEDDINGS_TIMEOUT_MS);
}

export const loadMcpConfig = (env: NodeJS.ProcessEnv | Readonly<NodeJS.ProcessEnv>): McpConfig => loadConfig(mcpConfigShape, env as NodeJS.ProcessEnv);
