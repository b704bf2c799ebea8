import test, { type ExecutionContext } from 'ava';
import { answerEndlessJson, servedOnLoopback } from '../helpers/loopback-server.js';
import nock from 'nock';
import { createEmbedder } from '../../services/mcp-tools/file-search/embeddings.js';
import { createRemoteSandbox } from '../../services/mcp-tools/sandbox/remote.js';
import { createSearxngBackend } from '../../services/mcp-tools/search/searxng.js';
import { createSerperBackend } from '../../services/mcp-tools/search/serper.js';
import { SearchBackendError } from '../../services/mcp-tools/search/types.js';

// mcp-tools' operator-configured endpoints (Serper and SearXNG with nock in their documented
// shapes; an embeddings server and a SandboxFusion service on loopback) go through the kit's
// trusted-endpoint client: the same error texts as before, and an answer too large for its limit
// refused while it streams instead of being buffered whole.
const SERPER = 'https://google.serper.dev';
const SEARXNG = 'https://searx.example.org';
const query = { q: 'otters', num: 5, page: 1 };

test.before(() => {
  nock.disableNetConnect();
  nock.enableNetConnect(/^(127\.0\.0\.1|localhost)(:\d+)?$/);
});
test.after.always(() => {
  nock.cleanAll();
  nock.enableNetConnect();
});

/** A loopback server that answers `prefix` and then JSON array items without end, until the client lets go. */
async function endless(t: ExecutionContext, prefix: string) {
  let answer: ReturnType<typeof answerEndlessJson> | null = null;
  const { origin } = await servedOnLoopback(t, (_req, res) => {
    answer = answerEndlessJson(res, prefix, 256 * 1024);
  });
  return { url: origin, written: () => answer?.written() ?? 0, closed: () => answer?.closed ?? Promise.resolve() };
}

test.serial('Serper: the key goes in X-API-KEY, and an oversized answer is an error result, not a buffered body', async (t) => {
  const scope = nock(SERPER, { reqheaders: { 'x-api-key': 'serper-key' } })
    .post('/search', { q: 'otters', num: 5, page: 1 })
    .reply(200, { organic: [{ title: 'Otter', link: 'https://example.org/otter', snippet: 'An otter.' }] });
  const serper = createSerperBackend({ apiKey: 'serper-key', baseUrl: SERPER, timeoutMs: 5000 });
  t.deepEqual(await serper.search(query, new AbortController().signal), [{ title: 'Otter', url: 'https://example.org/otter', snippet: 'An otter.' }]);
  t.true(scope.isDone());

  nock(SERPER).post('/search').reply(200, `{"organic":[${'"x",'.repeat(3 * 1024 * 1024)}"x"]}`, { 'content-type': 'application/json' });
  const error = await t.throwsAsync(serper.search(query, new AbortController().signal), { instanceOf: SearchBackendError });
  t.is(error!.message, 'Serper answered with more than 8388608 bytes');
});

test.serial('SearXNG: a refusal names the backend and what to check, never the query', async (t) => {
  nock(SEARXNG).get('/search').query(true).reply(401, 'no');
  const searxng = createSearxngBackend({ baseUrl: `${SEARXNG}/`, timeoutMs: 5000 });
  const error = await t.throwsAsync(searxng.search(query, new AbortController().signal), { instanceOf: SearchBackendError });
  t.is(error!.message, 'SearXNG answered HTTP 401 (check its API key)');
});

test('embeddings: an endless answer is refused at the limit and the connection let go', async (t) => {
  const server = await endless(t, '{"data":[');
  const embedder = createEmbedder({ url: server.url, model: 'm', timeoutMs: 30_000 });
  const error = await t.throwsAsync(embedder.embed(['otters'], new AbortController().signal));
  t.is(error!.message, 'the embeddings endpoint answered with more than 67108864 bytes');
  await server.closed();
  t.true(server.written() < 128 * 1024 * 1024, `${server.written()} bytes written`);
});

test('the remote sandbox: an endless answer is refused at the limit, and python_exec says so', async (t) => {
  const server = await endless(t, '{"status":"Success","run_result":{"stdout":[');
  const sandbox = createRemoteSandbox({ url: `${server.url}/`, slots: 1, outputLimitBytes: 64 * 1024 });
  const error = await t.throwsAsync(sandbox.run({ code: 'print(1)', timeoutMs: 20_000 }));
  t.is(error!.message, 'the remote sandbox answered with more than 8388608 bytes');
  await server.closed();
  t.true(server.written() < 64 * 1024 * 1024, `${server.written()} bytes written`);
});
