import { createTrustedEndpoint } from '../../kit/index.js';
import { SearchBackendError, hitOf, searchFailure, type SearchBackend, type SearchHit, type SearchQuery } from './types.js';

/**
 * Serper (google.serper.dev): `POST /search` with `X-API-KEY` and `{q, num, gl, hl, location, tbs, page}`;
 * the answer's `organic` array holds `{title, link, snippet, position}`. The kit's trusted-endpoint
 * client bounds the call (timeout, answer size) over global fetch, so tests intercept it with nock.
 */
export function createSerperBackend(options: { apiKey: string; baseUrl: string; timeoutMs: number }): SearchBackend {
  const serper = createTrustedEndpoint({ name: 'Serper', baseUrl: options.baseUrl, timeoutMs: options.timeoutMs, headers: { 'x-api-key': options.apiKey } });
  return {
    name: 'serper',
    async search(query: SearchQuery, signal: AbortSignal): Promise<SearchHit[]> {
      const body: Record<string, unknown> = { q: query.q, num: query.num, page: query.page };
      for (const key of ['gl', 'hl', 'location', 'tbs'] as const) if (query[key]) body[key] = query[key];
      let json: { organic?: unknown[] };
      try {
        json = await serper.json('search', { json: body, signal });
      } catch (error) {
        throw searchFailure(error);
      }
      if (json?.organic !== undefined && !Array.isArray(json.organic)) throw new SearchBackendError('Serper answered without an organic result list');
      return (json?.organic ?? []).map((r) => hitOf(r, { url: 'link', title: 'title', snippet: 'snippet' })).filter((hit) => hit !== null);
    },
  };
}
