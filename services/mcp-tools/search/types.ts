import { TrustedEndpointError } from '../../kit/index.js';

/** One web-search backend behind google_search (Serper or SearXNG, chosen by configuration). */
export interface SearchQuery {
  q: string;
  num: number;
  gl?: string;
  hl?: string;
  location?: string;
  tbs?: string;
  page: number;
}

export interface SearchHit {
  title: string;
  url: string;
  snippet: string;
}

/**
 * One entry of a backend's result list as a hit, read from the named fields; null when the entry is
 * not an object with a string URL. A title or snippet that is not a string counts as empty.
 */
export function hitOf(entry: unknown, fields: { url: string; title: string; snippet: string }): SearchHit | null {
  if (!entry || typeof entry !== 'object') return null;
  const r = entry as Record<string, unknown>;
  const text = (value: unknown) => (typeof value === 'string' ? value : '');
  return typeof r[fields.url] === 'string' ? { title: text(r[fields.title]), url: r[fields.url] as string, snippet: text(r[fields.snippet]) } : null;
}

export interface SearchBackend {
  readonly name: 'serper' | 'searxng';
  search(query: SearchQuery, signal: AbortSignal): Promise<SearchHit[]>;
}

/** A backend answered, but not with results (HTTP error, bad body): the message is shown to the caller. */
export class SearchBackendError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SearchBackendError';
  }
}

/**
 * A failed call to a backend (kit trusted-endpoint client) as the message shown to the caller: it
 * names the backend, never its key. Anything else (the caller's own cancellation) passes through.
 */
export function searchFailure(error: unknown): unknown {
  if (!(error instanceof TrustedEndpointError)) return error;
  const hint = error.failure === 'status' && (error.status === 401 || error.status === 403) ? ' (check its API key)' : '';
  return new SearchBackendError(`${error.message}${hint}`);
}
