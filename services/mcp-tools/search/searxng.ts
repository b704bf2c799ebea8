import { createTrustedEndpoint } from '../../kit/index.js';
import { SearchBackendError, hitOf, searchFailure, type SearchBackend, type SearchHit, type SearchQuery } from './types.js';

/**
 * A self-hosted SearXNG: `GET /search?q=…&format=json&pageno=…&language=…&time_range=…` (the JSON
 * format must be enabled in its settings.yml); results are `{url, title, content, engine, score}`.
 * Google's `tbs` recency filters map onto SearXNG's time ranges.
 */
const TIME_RANGES: Record<string, string> = { 'qdr:d': 'day', 'qdr:w': 'week', 'qdr:m': 'month', 'qdr:y': 'year' };

export function createSearxngBackend(options: { baseUrl: string; timeoutMs: number }): SearchBackend {
  const { baseUrl, headers } = withoutCredentials(options.baseUrl);
  const searxng = createTrustedEndpoint({ name: 'SearXNG', baseUrl, timeoutMs: options.timeoutMs, headers });
  return {
    name: 'searxng',
    async search(query: SearchQuery, signal: AbortSignal): Promise<SearchHit[]> {
      const params = {
        q: query.q,
        format: 'json',
        pageno: String(query.page),
        language: languageOf(query),
        time_range: query.tbs ? TIME_RANGES[query.tbs] : undefined,
      };
      let json: { results?: unknown[] };
      try {
        json = await searxng.json('search', { query: params, signal });
      } catch (error) {
        throw searchFailure(error);
      }
      if (!Array.isArray(json?.results)) throw new SearchBackendError('SearXNG answered without a results list (is format=json enabled?)');
      return json.results
        .map((r) => hitOf(r, { url: 'url', title: 'title', snippet: 'content' }))
        .filter((hit) => hit !== null)
        .slice(0, query.num);
    },
  };
}

/**
 * SearXNG's one `language` from Google's `hl` and `gl`: `en` + `us` is `en-US`. An `hl` that names
 * its region already (`en-GB`) is kept as it is: `en-GB-US` is no language SearXNG knows.
 */
function languageOf(query: SearchQuery): string | undefined {
  if (!query.hl) return undefined;
  if (query.hl.includes('-') || !query.gl) return query.hl;
  return `${query.hl}-${query.gl.toUpperCase()}`;
}

/**
 * A SearXNG behind HTTP Basic auth is configured as `https://user:pass@host/`. fetch refuses a URL
 * that holds credentials, so they travel as an `Authorization` header instead and the URL used
 * (the one error messages may show) has none. The userinfo is percent-encoded in the URL: decoded
 * here, as a browser would before sending it.
 */
export function withoutCredentials(configured: string): { baseUrl: string; headers?: Record<string, string> } {
  const url = new URL(configured);
  if (!url.username && !url.password) return { baseUrl: configured };
  const credentials = `${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`;
  url.username = '';
  url.password = '';
  return { baseUrl: url.href, headers: { authorization: `Basic ${Buffer.from(credentials, 'utf8').toString('base64')}` } };
}
