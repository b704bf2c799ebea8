import { checkedJson, SearchBackendError, type SearchBackend, type SearchHit, type SearchQuery } from './types.js';

/**
 * Serper (google.serper.dev): `POST /search` with `X-API-KEY` and `{q, num, gl, hl, location, tbs, page}`;
 * the answer's `organic` array holds `{title, link, snippet, position}`. Global fetch is used so
 * tests can intercept it with nock.
 */
export function createSerperBackend(options: { apiKey: string; baseUrl: string; timeoutMs: number }): SearchBackend {
  const endpoint = new URL('search', options.baseUrl.endsWith('/') ? options.baseUrl : `${options.baseUrl}/`).toString();
  return {
    name: 'serper',
    async search(query: SearchQuery, signal: AbortSignal): Promise<SearchHit[]> {
      const body: Record<string, unknown> = { q: query.q, num: query.num, page: query.page };
      for (const key of ['gl', 'hl', 'location', 'tbs'] as const) if (query[key]) body[key] = query[key];
      let res: Response;
      try {
        res = await fetch(endpoint, {
          method: 'POST',
          headers: { 'x-api-key': options.apiKey, 'content-type': 'application/json' },
          body: JSON.stringify(body),
          signal: AbortSignal.any([signal, AbortSignal.timeout(options.timeoutMs)]),
        });
      } catch (error) {
        throw new SearchBackendError(`Serper could not be reached (${(error as Error).name === 'TimeoutError' ? 'timed out' : 'network error'})`);
      }
      const json = (await checkedJson('Serper', res)) as { organic?: Array<Record<string, unknown>> };
      if (json.organic !== undefined && !Array.isArray(json.organic)) throw new SearchBackendError('Serper answered without an organic result list');
      return (json.organic ?? [])
        .filter((r) => typeof r.link === 'string')
        .map((r) => ({ title: String(r.title ?? ''), url: String(r.link), snippet: String(r.snippet ?? '') }));
    },
  };
}
