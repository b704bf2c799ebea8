import type { McpConfig } from '../config.js';
import { createSearxngBackend } from './searxng.js';
import { createSerperBackend } from './serper.js';
import type { SearchBackend } from './types.js';

export * from './types.js';

/** Serper when SERPER_API_KEY is set, else SearXNG when SEARXNG_URL is set, else none (the tool then says which settings to set). */
export function createSearchBackend(config: McpConfig): SearchBackend | null {
  if (config.SERPER_API_KEY) return createSerperBackend({ apiKey: config.SERPER_API_KEY, baseUrl: config.SERPER_URL, timeoutMs: config.SEARCH_TIMEOUT_MS });
  if (config.SEARXNG_URL) return createSearxngBackend({ baseUrl: config.SEARXNG_URL, timeoutMs: config.SEARCH_TIMEOUT_MS });
  return null;
}
