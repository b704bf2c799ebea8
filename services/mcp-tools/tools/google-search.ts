import { domainToASCII } from 'node:url';
import { z } from 'zod';
import { SearchBackendError, type SearchBackend, type SearchHit } from '../search/index.js';
import { ToolFailure, defineTool } from './tool.js';

/** A host name in its ASCII form: labels of letters, digits and inner hyphens; a letter TLD or an IDN (xn--) one. */
const HOST = /^(?=.{1,253}$)(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+(?:[a-z]{2,63}|xn--[a-z0-9-]{1,59})$/;
/**
 * A domain as URLs name it: lower case, an internationalised name (bücher.de) in its punycode form;
 * '' for anything but letters, digits, dots and hyphens (domainToASCII would cut `example.com/path` to its host).
 */
const asciiDomain = (d: string) => (/^[\p{L}\p{M}\p{N}.-]+$/u.test(d.trim()) ? domainToASCII(d.trim().toLowerCase()) : '');
const domain = z.string().min(1).max(253).refine((d) => HOST.test(asciiDomain(d)), 'a domain name such as example.com (no scheme, path or wildcard)');
const RECENCY = ['qdr:d', 'qdr:w', 'qdr:m', 'qdr:y'] as const;

const input = z
  .object({
    q: z.string().trim().min(1).max(2048).describe('The search query.'),
    num: z.number().int().min(1).max(100).default(10).describe('How many results (default 10, max 100).'),
    gl: z.string().regex(/^[a-z]{2}$/i, 'a two-letter country code').optional().describe('Country of the search, e.g. "us".'),
    hl: z.string().regex(/^[a-z]{2}(-[a-z]{2,4})?$/i, 'a language code such as en').optional().describe('Interface language, e.g. "en".'),
    location: z.string().max(256).optional().describe('Place the search is made from, e.g. "Berlin, Germany".'),
    tbs: z.enum(RECENCY).optional().describe('Recency filter: qdr:d (day), qdr:w (week), qdr:m (month), qdr:y (year).'),
    page: z.number().int().min(1).max(100).default(1).describe('Result page (default 1).'),
    domain_allow_list: z.array(domain).max(20).optional().describe('Only return results from these domains (and their subdomains).'),
  })
  .strict();

const result = z.object({ title: z.string(), url: z.string(), snippet: z.string(), position: z.number().int() });
const output = z.object({
  query: z.string(),
  backend: z.string(),
  results: z.array(result),
  citations: z.array(z.object({ id: z.number().int(), url: z.string(), title: z.string() })),
});

const NOT_CONFIGURED = 'Web search is not configured: set SERPER_API_KEY (Serper) or SEARXNG_URL (self-hosted SearXNG)';

export function googleSearchTool(deps: { search: SearchBackend | null }) {
  return defineTool({
    name: 'google_search',
    title: 'Web search',
    description:
      'Searches the web and returns ranked results (title, URL, snippet, position). Use it for current events, ' +
      'facts to verify and pages to read next with `scrape`. Cite results by their [n] number. Optional: ' +
      'num (result count), gl/hl (country/language), location, tbs (qdr:d|w|m|y for recency), page, ' +
      'domain_allow_list (restrict to domains).',
    input,
    output,
    annotations: { readOnlyHint: true, openWorldHint: true, idempotentHint: true },
    unavailableReason: () => (deps.search ? null : NOT_CONFIGURED),
    async run(ctx, args) {
      if (!deps.search) throw new ToolFailure(NOT_CONFIGURED);
      const allow = (args.domain_allow_list ?? []).map(asciiDomain);
      // The backend narrows the search itself; the results are filtered again because engines treat site: loosely.
      const q = allow.length ? `${args.q} (${allow.map((d) => `site:${d}`).join(' OR ')})` : args.q;
      let hits: SearchHit[];
      try {
        hits = await deps.search.search({ q, num: args.num, gl: args.gl, hl: args.hl, location: args.location, tbs: args.tbs, page: args.page }, ctx.signal);
      } catch (error) {
        if (error instanceof SearchBackendError) throw new ToolFailure(`Search failed: ${error.message}`);
        throw error;
      }
      const kept = hits.filter((hit) => isWebUrl(hit.url) && (allow.length === 0 || allowed(hit.url, allow))).slice(0, args.num);
      const results = kept.map((hit, i) => ({ ...hit, position: i + 1 }));
      const structured = {
        query: args.q,
        backend: deps.search.name,
        results,
        citations: results.map((r) => ({ id: r.position, url: r.url, title: r.title })),
      };
      const text = results.length
        ? results.map((r) => `[${r.position}] ${r.title}\n${r.url}\n${r.snippet}`).join('\n\n')
        : `No results for "${args.q}".`;
      return { structured, text };
    },
  });
}

/** Only http(s) results reach the caller: a javascript:, data: or file: link from a backend is dropped. */
function isWebUrl(url: string): boolean {
  return URL.canParse(url) && ['http:', 'https:'].includes(new URL(url).protocol);
}

function allowed(url: string, domains: string[]): boolean {
  let host: string;
  try {
    host = new URL(url).hostname.toLowerCase();
  } catch {
    return false;
  }
  return domains.some((d) => host === d || host.endsWith(`.${d}`));
}
