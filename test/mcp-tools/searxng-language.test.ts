import test from 'ava';
import nock from 'nock';
import { startMcpPlatform, type McpPlatform } from '../mcp/helpers.js';

// google_search on SearXNG (nock in its documented JSON shape, https://docs.searxng.org/dev/search_api.html):
// Google's `hl` and `gl` become SearXNG's one `language`. An `hl` that already names its region
// (`en-GB`) is sent as it is: `en-GB-US` is no language SearXNG knows.
const SEARXNG = 'https://searx.example.org';
let p: McpPlatform;
let key: string;

test.before(async () => {
  nock.disableNetConnect();
  nock.enableNetConnect(/^(127\.0\.0\.1|localhost)(:\d+)?$/);
  p = await startMcpPlatform({ SEARXNG_URL: SEARXNG });
  ({ key } = await p.newUser());
});
test.after.always(async () => {
  await p?.stop();
  nock.cleanAll();
  nock.enableNetConnect();
});

const answer = {
  query: 'otters',
  number_of_results: 0,
  results: [{ url: 'https://en.wikipedia.org/wiki/Otter', title: 'Otter - Wikipedia', content: 'Otters are carnivorous mammals.', engine: 'google', engines: ['google'], positions: [1], score: 1, category: 'general' }],
  answers: [],
  corrections: [],
  infoboxes: [],
  suggestions: [],
  unresponsive_engines: [],
};

for (const [hl, gl, language] of [
  ['en', 'us', 'en-US'],
  ['en-GB', 'us', 'en-GB'],
  ['zh-Hans', 'cn', 'zh-Hans'],
  ['de', undefined, 'de'],
] as const) {
  test.serial(`hl ${hl} with gl ${gl ?? '(none)'} asks SearXNG for language ${language}`, async (t) => {
    let sent: Record<string, string> = {};
    const scope = nock(SEARXNG)
      .get('/search')
      .query((q) => {
        sent = q as Record<string, string>;
        return true;
      })
      .reply(200, answer);
    const client = await p.client(key);
    const result: any = await client.callTool({ name: 'google_search', arguments: { q: 'otters', hl, ...(gl ? { gl } : {}) } });
    t.true(scope.isDone());
    t.falsy(result.isError, JSON.stringify(result.content));
    t.is(sent.language, language);
    t.is(result.structuredContent.results[0].url, 'https://en.wikipedia.org/wiki/Otter');
  });
}
