import test from 'ava';
import nock from 'nock';
import { startMcpPlatform, type McpPlatform } from '../mcp/helpers.js';

// A SearXNG behind HTTP Basic auth, configured with its credentials in the URL. fetch refuses a URL
// that holds credentials, so every search failed as "could not be reached". The credentials now go
// as an Authorization header (percent-escapes in the userinfo decoded) to the URL without them, and
// no answer the caller sees repeats them. SearXNG is nock in its documented JSON shape.
const HOST = 'https://searx.example';
let p: McpPlatform;
let key: string;

test.before(async () => {
  nock.disableNetConnect();
  nock.enableNetConnect(/^(127\.0\.0\.1|localhost)(:\d+)?$/);
  p = await startMcpPlatform({ SEARXNG_URL: 'https://searcher:p%40ss:w0rd@searx.example/base/' });
  ({ key } = await p.newUser());
});
test.after.always(async () => {
  await p?.stop();
  nock.cleanAll();
  nock.enableNetConnect();
});

const BASIC = `Basic ${Buffer.from('searcher:p@ss:w0rd').toString('base64')}`;
const answer = { query: 'otters', number_of_results: 0, results: [{ url: 'https://en.wikipedia.org/wiki/Otter', title: 'Otter', content: 'Otters are mammals.', engine: 'google', score: 1 }] };

test.serial('credentials in SEARXNG_URL are sent as Basic auth to the URL without them', async (t) => {
  let authorization: string | undefined;
  const scope = nock(HOST)
    .get('/base/search')
    .query(true)
    .reply(function reply() {
      authorization = this.req.headers.authorization as string | undefined;
      return [200, answer];
    });
  const client = await p.client(key);
  const result: any = await client.callTool({ name: 'google_search', arguments: { q: 'otters' } });
  t.true(scope.isDone());
  t.falsy(result.isError, JSON.stringify(result.content));
  t.is(authorization, BASIC);
  t.is(result.structuredContent.results[0].url, 'https://en.wikipedia.org/wiki/Otter');
});

test.serial('a refusal by the SearXNG names it without its credentials', async (t) => {
  const scope = nock(HOST).get('/base/search').query(true).reply(401, 'no');
  const client = await p.client(key);
  const result: any = await client.callTool({ name: 'google_search', arguments: { q: 'otters' } });
  t.true(scope.isDone());
  t.true(result.isError);
  const text = JSON.stringify(result);
  t.regex(text, /SearXNG answered HTTP 401/);
  t.false(/searcher|p@ss|p%40ss|w0rd/.test(text), text);
});
