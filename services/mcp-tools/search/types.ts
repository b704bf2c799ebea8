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
