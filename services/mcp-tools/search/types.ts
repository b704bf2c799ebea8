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

/** Turns a fetch failure or a non-2xx answer into a message that names the backend, never its key. */
export async function checkedJson(backend: string, res: Response): Promise<unknown> {
  if (!res.ok) {
    await res.body?.cancel().catch(() => {});
    throw new SearchBackendError(`${backend} answered HTTP ${res.status}${res.status === 401 || res.status === 403 ? ' (check its API key)' : ''}`);
  }
  try {
    return await res.json();
  } catch {
    throw new SearchBackendError(`${backend} answered with a body that is not JSON`);
  }
}
