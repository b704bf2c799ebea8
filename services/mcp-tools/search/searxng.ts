import { checkedJson, SearchBackendError, type SearchBackend, type SearchHit, type SearchQuery } from './types.js';

/**
 * A self-hosted SearXNG: `GET /search?q=…&format=json&pageno=…&language=…&time_range=…` (the JSON
 * format must be enabled in its settings.yml); results are `{url, title, content, engine, score}`.
 * Google's `tbs` recency filters map onto SearXNG's time ranges.
 */
const TIME_RANGES: Record<string, string> = { 'qdr:d': 'day', 'qdr:w': 'week', 'qdr:m': 'month', 'qdr:y': 'year' };

export function createSearxngBackend(options: { baseUrl: string; timeoutMs: number }): SearchBackend {
  const endpoint = new URL('search', options.baseUrl.endsWith('/') ? options.baseUrl : `${options.baseUrl}/`);
  return {
    name: 'searxng',
    async search(query: SearchQuery, signal: AbortSignal): Promise<SearchHit[]> {
      const url = new URL(endpoint);
      url.searchParams.set('q', query.q);
      url.searchParams.set('format', 'json');
      url.searchParams.set('pageno', String(query.page));
      if (query.hl) url.searchParams.set('language', query.gl ? `${query.hl}-${query.gl.toUpperCase()}` : query.hl);
      const range = query.tbs ? TIME_RANGES[query.tbs] : undefined;
      if (range) url.searchParams.set('time_range', range);
      let res: Response;
      try {
        res = await fetch(url, { headers: { accept: 'application/json' }, signal: AbortSignal.any([signal, AbortSignal.timeout(options.timeoutMs)]) });
      } catch (error) {
        throw new SearchBackendError(`SearXNG could not be reached (${(error as Error).name === 'TimeoutError' ? 'timed out' : 'network error'})`);
      }
      const json = (await checkedJson('SearXNG', res)) as { results?: Array<Record<string, unknown>> };
      if (!Array.isArray(json.results)) throw new SearchBackendError('SearXNG answered without a results list (is format=json enabled?)');
      return json.results
        .filter((r) => typeof r.url === 'string')
        .slice(0, query.num)
        .map((r) => ({ title: String(r.title ?? ''), url: String(r.url), snippet: String(r.content ?? '') }));
    },
  };
}
