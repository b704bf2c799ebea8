import test from 'ava';
import nock from 'nock';
import { assertStorable } from '../../services/kit/index.js';
import { waitFor } from '../helpers/wait.js';
import { ARTICLE_HTML, startMcpPlatform, startSite, type McpPlatform } from '../mcp/helpers.js';

// Found by a second audit of mcp-tools, through the edge with the SDK client:
// - scrape returned a page's <title> whole and as the page wrote it: a title of megabytes came back
//   with `max_chars: 100`, and one holding line breaks broke the Markdown heading it is rendered as;
// - scrape ignored a byte order mark: a UTF-16 text file saved on Windows (a BOM, served as
//   text/plain without a charset) was refused as binary, and a UTF-8 BOM under a Latin-1 header was
//   read as mojibake;
// - the threads that read HTML pages (two per process) were taken first come, first served: one
//   user scraping a few pages that take the whole SCRAPE_TIMEOUT_MS to read held both, and every
//   other user's ordinary page waited past its own bound and failed as "too complex to read";
// - a tool result could hold what the platform refuses in every request (a NUL in a page past the
//   binary sniff or in a program's output, an unpaired surrogate in a search backend's JSON): a
//   client passing the result on to the chat API was refused there.
let p: McpPlatform;
let key: string;
let site: Awaited<ReturnType<typeof startSite>>;
/** Times the deep page (tens of seconds to read) was served. */
let deepServed = 0;

const utf16le = (text: string) => Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(text, 'utf16le')]);
const utf16be = (text: string) => Buffer.concat([Buffer.from([0xfe, 0xff]), Buffer.from(text, 'utf16le').swap16()]);

test.before(async () => {
  site = await startSite({
    '/long-title': { type: 'text/html', body: `<html><head><title>${'Otter '.repeat(50_000)}</title></head><body><p>Sea otters hold hands.</p></body></html>` },
    '/split-title': { type: 'text/html', body: '<html><head><title>Otters\n\n## of the\r\n  Pacific</title></head><body><p>Sea otters hold hands.</p></body></html>' },
    '/utf16le.txt': { type: 'text/plain', body: utf16le('Sea otters hold hands, naïvely.') },
    '/utf16be.txt': { body: utf16be('Sea otters hold hands, naïvely.') },
    '/utf16.html': { type: 'text/html', body: utf16le('<html><head><title>Otters</title></head><body><p>Sea otters hold hands, naïvely.</p></body></html>') },
    '/deep': () => {
      deepServed++;
      return { type: 'text/html', body: `<!doctype html><html><head><title>Deep</title></head><body>${'<div>'.repeat(1500)}deep text${'</div>'.repeat(1500)}</body></html>` };
    },
    '/article': { type: 'text/html; charset=utf-8', body: ARTICLE_HTML },
    // A text file with a NUL past the first 4 KiB (where binary content is sniffed).
    '/nul-late.txt': { type: 'text/plain', body: `${'otter '.repeat(1000)}raft\u0000end` },
    '/bom-over-header': { type: 'text/plain; charset=iso-8859-1', body: Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('Straße', 'utf8')]) },
  });
  p = await startMcpPlatform({ EGRESS_ALLOW_HOSTS: '127.0.0.1', SCRAPE_TIMEOUT_MS: '3000', SERPER_API_KEY: 'serper-test-key-0123456789' });
  ({ key } = await p.newUser());
});
test.after.always(async () => {
  nock.cleanAll();
  await p?.stop();
  await site?.close();
});

async function scrape(path: string, extra: Record<string, unknown> = {}, as = key): Promise<any> {
  const client = await p.client(as);
  return client.callTool({ name: 'scrape', arguments: { url: site.url(path), ...extra } });
}

test('scrape: a page title is one line and never longer than max_chars (nor 1000 characters)', async (t) => {
  const short = await scrape('/long-title', { max_chars: 100 });
  t.falsy(short.isError, short.content[0].text);
  t.is(short.structuredContent.title.length, 100);
  t.true(short.structuredContent.title.startsWith('Otter Otter'));
  t.true(short.content[0].text.length < 300, 'the text rendering is bounded too');
  const long = await scrape('/long-title', { max_chars: 100_000 });
  t.is(long.structuredContent.title.length, 1000);
  const split = await scrape('/split-title');
  t.is(split.structuredContent.title, 'Otters ## of the Pacific');
  t.true(split.content[0].text.startsWith('# Otters ## of the Pacific\n'), split.content[0].text);
});

test('scrape: a byte order mark names the encoding: UTF-16 text and HTML are read, a UTF-8 BOM outranks the header', async (t) => {
  for (const path of ['/utf16le.txt', '/utf16be.txt']) {
    const result = await scrape(path);
    t.falsy(result.isError, `${path}: ${result.content[0].text}`);
    t.is(result.structuredContent.content, 'Sea otters hold hands, naïvely.', path);
  }
  const html = await scrape('/utf16.html', { format: 'text' });
  t.falsy(html.isError, html.content[0].text);
  t.is(html.structuredContent.title, 'Otters');
  t.regex(html.structuredContent.content, /Sea otters hold hands, naïvely\./);
  const bom = await scrape('/bom-over-header');
  t.is(bom.structuredContent.content, 'Straße');
});

test("scrape: one user's pages that take the whole bound to read hold at most half the reading threads; another user's page is read", async (t) => {
  const { key: heavy } = await p.newUser();
  const { key: other } = await p.newUser();
  const before = deepServed;
  // Four pages that each take Readability far longer than SCRAPE_TIMEOUT_MS (3 s).
  const slow = Array.from({ length: 4 }, () => scrape('/deep', {}, heavy));
  // Every one is fetched (so waiting for or on a reading thread) before the other user asks.
  await waitFor(() => deepServed - before >= 4, 10_000, 'the deep pages fetched');
  const article = await scrape('/article', { format: 'text' }, other);
  t.falsy(article.isError, article.content[0].text);
  t.regex(article.structuredContent.content, /Sea otters hold hands/);
  for (const result of await Promise.all(slow)) {
    t.true(result.isError);
    t.regex(result.content[0].text, /too complex to read within 3000 ms/);
  }
});

const UNSTORABLE = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

test('a NUL or an unpaired surrogate from a page, a program or a search backend comes back as U+FFFD, never as itself', async (t) => {
  const client = await p.client(key);
  const run: any = await client.callTool({ name: 'python_exec', arguments: { code: 'import sys\nprint("a\\x00b")\nprint("c\\x00d", file=sys.stderr)' } });
  t.falsy(run.isError, run.content[0].text);
  t.is(run.structuredContent.stdout, 'a\ufffdb\n');
  t.is(run.structuredContent.stderr, 'c\ufffdd\n');
  t.false(UNSTORABLE.test(run.content[0].text));

  const page: any = await scrape('/nul-late.txt');
  t.falsy(page.isError, page.content[0].text);
  t.true(page.structuredContent.content.endsWith('raft\ufffdend'));
  t.false(UNSTORABLE.test(page.content[0].text));

  // Serper's JSON may escape any code unit: an escaped lone surrogate parses to one.
  nock('https://google.serper.dev')
    .post('/search')
    .reply(200, '{"organic":[{"title":"Sea \\ud800otters","link":"https://otters.example/","snippet":"raft\\u0000ing","position":1}]}', { 'content-type': 'application/json' });
  const search: any = await client.callTool({ name: 'google_search', arguments: { q: 'otters' } });
  t.falsy(search.isError, search.content[0].text);
  t.like(search.structuredContent.results[0], { title: 'Sea \ufffdotters', snippet: 'raft\ufffding', url: 'https://otters.example/' });
  t.false(UNSTORABLE.test(search.content[0].text));
  // What the client got, the platform takes in a request (a chat message): no value it refuses.
  for (const result of [run, page, search]) t.notThrows(() => assertStorable(result));
});
