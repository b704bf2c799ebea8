import test from 'ava';
import nock from 'nock';
import { startMcpPlatform, type McpPlatform } from './helpers.js';

// google_search through the edge with the SDK client, against nock in each backend's documented
// response shape: Serper (POST https://google.serper.dev/search, `organic` results) and SearXNG
// (GET /search?format=json, `results`). Only the third-party hosts are mocked.
const SERPER_KEY = 'serper-test-key-0123456789';
const SEARXNG = 'https://searx.example.org';
let serper: McpPlatform;
let searxng: McpPlatform;
let serperKey: string;
let searxngKey: string;

test.before(async () => {
  nock.disableNetConnect();
  nock.enableNetConnect(/^(127\.0\.0\.1|localhost)(:\d+)?$/);
  [serper, searxng] = await Promise.all([
    startMcpPlatform({ SERPER_API_KEY: SERPER_KEY, SEARXNG_URL: SEARXNG }),
    startMcpPlatform({ SEARXNG_URL: SEARXNG }),
  ]);
  serperKey = (await serper.newUser()).key;
  searxngKey = (await searxng.newUser()).key;
});
test.after.always(async () => {
  await serper?.stop();
  await searxng?.stop();
  nock.cleanAll();
  nock.enableNetConnect();
});

// Serper's documented answer (https://serper.dev, "search" endpoint).
const serperAnswer = {
  searchParameters: { q: 'sea otters tools', gl: 'us', hl: 'en', type: 'search', num: 3, page: 1, engine: 'google' },
  knowledgeGraph: { title: 'Sea otter', type: 'Animal', description: 'The sea otter is a marine mammal native to the coasts of the northern and eastern North Pacific Ocean.' },
  organic: [
    { title: 'Sea otter - Wikipedia', link: 'https://en.wikipedia.org/wiki/Sea_otter', snippet: 'Sea otters use rocks to dislodge prey and to open shells.', position: 1 },
    { title: 'Tool use by sea otters', link: 'https://www.nature.com/articles/otters', snippet: 'Otters have used stone tools for thousands of years.', date: 'Apr 4, 2024', position: 2 },
    { title: 'Otters | Monterey Bay Aquarium', link: 'https://www.montereybayaquarium.org/animals/otters', snippet: 'Meet the otters.', sitelinks: [{ title: 'Live cam', link: 'https://www.montereybayaquarium.org/cam' }], position: 3 },
  ],
  peopleAlsoAsk: [{ question: 'Do otters hold hands?', snippet: 'Yes.', title: 'Otters', link: 'https://example.com/otters' }],
  relatedSearches: [{ query: 'sea otter facts' }],
  credits: 1,
};

// SearXNG's JSON format (https://docs.searxng.org/dev/search_api.html).
const searxngAnswer = {
  query: 'sea otters tools',
  number_of_results: 0,
  results: [
    { url: 'https://en.wikipedia.org/wiki/Sea_otter', title: 'Sea otter - Wikipedia', content: 'Sea otters use rocks to dislodge prey.', engine: 'google', parsed_url: ['https', 'en.wikipedia.org', '/wiki/Sea_otter', '', '', ''], template: 'default.html', engines: ['google', 'bing'], positions: [1, 1], score: 4.0, category: 'general' },
    { url: 'https://www.nature.com/articles/otters', title: 'Tool use by sea otters', content: 'Otters have used stone tools.', engine: 'bing', engines: ['bing'], positions: [2], score: 1.5, category: 'general' },
  ],
  answers: [],
  corrections: [],
  infoboxes: [],
  suggestions: ['sea otter facts'],
  unresponsive_engines: [],
};

test.serial('Serper: the query reaches Serper with the key, and ranked results with citations come back', async (t) => {
  let sentKey: string | undefined;
  const scope = nock('https://google.serper.dev')
    .post('/search', { q: 'sea otters tools', num: 3, page: 1, gl: 'us', hl: 'en', tbs: 'qdr:w' })
    .reply(function reply() {
      sentKey = this.req.headers['x-api-key'] as string;
      return [200, serperAnswer];
    });
  const client = await serper.client(serperKey);
  const result: any = await client.callTool({ name: 'google_search', arguments: { q: 'sea otters tools', num: 3, gl: 'us', hl: 'en', tbs: 'qdr:w' } });
  t.true(scope.isDone());
  t.is(sentKey, SERPER_KEY);
  t.falsy(result.isError);
  const out = result.structuredContent;
  t.is(out.backend, 'serper');
  t.deepEqual(out.results[0], { title: 'Sea otter - Wikipedia', url: 'https://en.wikipedia.org/wiki/Sea_otter', snippet: 'Sea otters use rocks to dislodge prey and to open shells.', position: 1 });
  t.deepEqual(out.results.map((r: any) => r.position), [1, 2, 3]);
  t.deepEqual(out.citations[1], { id: 2, url: 'https://www.nature.com/articles/otters', title: 'Tool use by sea otters' });
  t.regex(result.content[0].text, /^\[1\] Sea otter - Wikipedia\nhttps:\/\/en\.wikipedia\.org\/wiki\/Sea_otter/);
});

test.serial('Serper: domain_allow_list narrows the query and filters the results', async (t) => {
  let sentQuery = '';
  nock('https://google.serper.dev')
    .post('/search', (body) => {
      sentQuery = body.q;
      return true;
    })
    .reply(200, serperAnswer);
  const client = await serper.client(serperKey);
  const result: any = await client.callTool({ name: 'google_search', arguments: { q: 'sea otters tools', domain_allow_list: ['wikipedia.org', 'montereybayaquarium.org'] } });
  t.is(sentQuery, 'sea otters tools (site:wikipedia.org OR site:montereybayaquarium.org)');
  t.deepEqual(result.structuredContent.results.map((r: any) => [r.position, new URL(r.url).hostname]), [
    [1, 'en.wikipedia.org'],
    [2, 'www.montereybayaquarium.org'],
  ]);
  t.is(result.structuredContent.query, 'sea otters tools');
});

test.serial('Serper: a rejected key is an error result that names the cause but never the key', async (t) => {
  nock('https://google.serper.dev').post('/search').reply(403, { message: 'Unauthorized.', statusCode: 403 });
  const client = await serper.client(serperKey);
  const result: any = await client.callTool({ name: 'google_search', arguments: { q: 'otters' } });
  t.true(result.isError);
  t.regex(result.content[0].text, /Serper answered HTTP 403 \(check its API key\)/);
  t.false(result.content[0].text.includes(SERPER_KEY));
});

test.serial('SearXNG: the query goes out as GET /search?format=json with page, language and time range', async (t) => {
  let query: Record<string, string> = {};
  const scope = nock(SEARXNG)
    .get('/search')
    .query((q) => {
      query = q as Record<string, string>;
      return true;
    })
    .reply(200, searxngAnswer);
  const client = await searxng.client(searxngKey);
  const result: any = await client.callTool({ name: 'google_search', arguments: { q: 'sea otters tools', hl: 'en', gl: 'us', tbs: 'qdr:m', page: 2, num: 5 } });
  t.true(scope.isDone());
  t.deepEqual(query, { q: 'sea otters tools', format: 'json', pageno: '2', language: 'en-US', time_range: 'month' });
  const out = result.structuredContent;
  t.is(out.backend, 'searxng');
  t.deepEqual(out.results, [
    { title: 'Sea otter - Wikipedia', url: 'https://en.wikipedia.org/wiki/Sea_otter', snippet: 'Sea otters use rocks to dislodge prey.', position: 1 },
    { title: 'Tool use by sea otters', url: 'https://www.nature.com/articles/otters', snippet: 'Otters have used stone tools.', position: 2 },
  ]);
});

test.serial('SearXNG: an answer without the JSON results list is an error result saying what to check', async (t) => {
  nock(SEARXNG).get('/search').query(true).reply(200, '<html>format not allowed</html>', { 'content-type': 'text/html' });
  const client = await searxng.client(searxngKey);
  const result: any = await client.callTool({ name: 'google_search', arguments: { q: 'otters' } });
  t.true(result.isError);
  t.regex(result.content[0].text, /SearXNG answered with a body that is not JSON/);
});

test.serial('search arguments are checked before any backend is called', async (t) => {
  const client = await searxng.client(searxngKey);
  const result: any = await client.callTool({ name: 'google_search', arguments: { q: 'otters', domain_allow_list: ['not a domain'] } });
  t.true(result.isError);
  t.regex(result.content[0].text, /arguments\.domain_allow_list\[0\]/);
  t.true(nock.isDone(), 'no request was left pending');
});

test.serial('Serper: results whose link is not http(s) (javascript:, data:, file:) never reach the caller; citation ids stay 1..n', async (t) => {
  nock('https://google.serper.dev')
    .post('/search')
    .reply(200, {
      organic: [
        { title: 'Click me', link: 'javascript:alert(document.cookie)', snippet: 'x', position: 1 },
        { title: 'Sea otter - Wikipedia', link: 'https://en.wikipedia.org/wiki/Sea_otter', snippet: 'Otters.', position: 2 },
        { title: 'Inline', link: 'data:text/html,<script>alert(1)</script>', snippet: 'y', position: 3 },
        { title: 'Local', link: 'file:///etc/passwd', snippet: 'z', position: 4 },
        { title: 'Otters', link: 'http://otters.example.org/', snippet: 'More otters.', position: 5 },
      ],
    });
  const client = await serper.client(serperKey);
  const result: any = await client.callTool({ name: 'google_search', arguments: { q: 'otters' } });
  t.falsy(result.isError);
  const out = result.structuredContent;
  t.deepEqual(out.results.map((r: any) => [r.position, r.url]), [
    [1, 'https://en.wikipedia.org/wiki/Sea_otter'],
    [2, 'http://otters.example.org/'],
  ]);
  t.deepEqual(out.citations.map((c: any) => c.id), [1, 2]);
  t.notRegex(result.content[0].text, /javascript:|data:|file:/);
});

test.serial('malformed result entries (null, numbers, fields of the wrong type) are skipped, not a tool failure', async (t) => {
  const entries = (url: string) => [null, 42, 'https://a.example', [], { [url]: 7 }, { [url]: 'https://ok.example.org/', title: { x: 1 }, snippet: ['s'], content: 5 }];
  nock('https://google.serper.dev').post('/search').reply(200, { organic: entries('link') });
  nock(SEARXNG).get('/search').query(true).reply(200, { results: entries('url') });
  for (const [platform, key] of [[serper, serperKey], [searxng, searxngKey]] as const) {
    const client = await platform.client(key);
    const result: any = await client.callTool({ name: 'google_search', arguments: { q: 'otters' } });
    t.falsy(result.isError, result.content[0].text);
    t.deepEqual(result.structuredContent.results, [{ title: '', url: 'https://ok.example.org/', snippet: '', position: 1 }]);
  }
  t.true(nock.isDone());
});

test.serial('Serper: 429 and an HTML 502 page are error results naming the status', async (t) => {
  nock('https://google.serper.dev').post('/search').reply(429, { message: 'Too many requests' });
  nock('https://google.serper.dev').post('/search').reply(502, '<html><body>Bad Gateway</body></html>', { 'content-type': 'text/html' });
  const client = await serper.client(serperKey);
  for (const status of [429, 502]) {
    const result: any = await client.callTool({ name: 'google_search', arguments: { q: 'otters' } });
    t.true(result.isError);
    t.regex(result.content[0].text, new RegExp(`^Search failed: Serper answered HTTP ${status}$`));
  }
});

test.serial('tbs outside qdr:d|w|m|y and domain entries that are URLs, wildcards or malformed are refused', async (t) => {
  const client = await searxng.client(searxngKey);
  const refused = [
    { tbs: 'qdr:h' },
    { tbs: 'nonsense' },
    ...['https://example.com', '*.example.com', '.example.com', 'example..com', 'example.com/path', '-example.com', 'localhost', ' '].map((d) => ({ domain_allow_list: [d] })),
  ];
  for (const extra of refused) {
    const result: any = await client.callTool({ name: 'google_search', arguments: { q: 'otters', ...extra } });
    t.true(result.isError, JSON.stringify(extra));
    t.regex(result.content[0].text, 'domain_allow_list' in extra ? /arguments\.domain_allow_list\[0\]/ : /arguments\.tbs/, JSON.stringify(extra));
  }
  t.true(nock.isDone(), 'no backend was called');
});

test.serial('an internationalised domain in domain_allow_list is searched and matched in its punycode form', async (t) => {
  let sentQuery = '';
  nock('https://google.serper.dev')
    .post('/search', (body) => {
      sentQuery = body.q;
      return true;
    })
    .reply(200, {
      organic: [
        { title: 'München', link: 'https://www.münchen.de/rathaus', snippet: 'Stadt.', position: 1 },
        { title: 'Elsewhere', link: 'https://example.org/', snippet: 'No.', position: 2 },
        { title: 'Punycode', link: 'https://xn--mnchen-3ya.de/', snippet: 'Ja.', position: 3 },
      ],
    });
  const client = await serper.client(serperKey);
  const result: any = await client.callTool({ name: 'google_search', arguments: { q: 'rathaus', domain_allow_list: ['MÜNCHEN.de'] } });
  t.falsy(result.isError, result.content[0].text);
  t.is(sentQuery, 'rathaus (site:xn--mnchen-3ya.de)');
  t.deepEqual(result.structuredContent.results.map((r: any) => r.title), ['München', 'Punycode']);
});
