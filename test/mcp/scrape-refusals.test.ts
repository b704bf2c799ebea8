import test from 'ava';
import { startMcpPlatform, startSite, ARTICLE_HTML, type McpPlatform } from './helpers.js';

// scrape through the edge against the egress guard: only 127.0.0.1 is allowed (the local site);
// metadata, other loopback and private addresses, and redirects from the allowed host into them
// are refused with an error result. Binary and oversized content is refused too.
let p: McpPlatform;
let site: Awaited<ReturnType<typeof startSite>>;
let key: string;

test.before(async () => {
  site = await startSite({
    '/article': { type: 'text/html', body: ARTICLE_HTML },
    '/to-private': { status: 302, headers: { location: 'http://10.0.0.1/secret' } },
    '/to-metadata': { status: 301, headers: { location: 'http://169.254.169.254/latest/meta-data/' } },
    '/to-other-loopback': (port) => ({ status: 302, headers: { location: `http://127.0.0.2:${port}/article` } }),
    '/to-localhost': (port) => ({ status: 307, headers: { location: `http://localhost:${port}/article` } }),
    '/to-article': { status: 302, headers: { location: '/article' } },
    '/loop': { status: 302, headers: { location: '/loop' } },
    '/not-modified': { status: 304 },
    '/image.png': { type: 'image/png', body: Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13]) },
    '/untyped-binary': { body: Buffer.from([0x7f, 0x45, 0x4c, 0x46, 0, 0, 0, 0]) },
    '/huge': { type: 'text/plain', body: 'x'.repeat(300 * 1024) },
    // Types that only begin like a text type: the whole type is matched, not a prefix of it.
    '/jsonx': { type: 'application/jsonx', body: '{"otter": 1}' },
    '/xml-suffixed': { type: 'application/xml-dtd-whatever', body: '<otter/>' },
    '/javascript-archive': { type: 'application/javascript-archive; charset=utf-8', body: 'var otter = 1;' },
    '/json-then-more': { type: 'application/vnd.otter+jsonx', body: '{"otter": 1}' },
    // Text types, with parameters and in capitals, are still read.
    '/json': { type: 'Application/JSON; charset=utf-8', body: '{"otter": "raft"}' },
    '/vendor-json': { type: 'application/vnd.api+json', body: '{"data": "raft"}' },
    '/csv': { type: 'application/csv', body: 'otter,raft' },
    '/markdown': { type: 'text/markdown;charset=UTF-8', body: '# raft' },
  });
  p = await startMcpPlatform({ EGRESS_ALLOW_HOSTS: '127.0.0.1', SCRAPE_MAX_BYTES: '200kb' });
  ({ key } = await p.newUser());
});
test.after.always(async () => {
  await p?.stop();
  await site?.close();
});

async function scrape(url: string): Promise<{ isError?: boolean; text: string; page?: any }> {
  const client = await p.client(key);
  const result: any = await client.callTool({ name: 'scrape', arguments: { url } });
  return { isError: result.isError, text: result.content[0].text, page: result.structuredContent };
}

const refusals: Array<[string, string | ((port: number) => string), RegExp]> = [
  ['the cloud metadata address', 'http://169.254.169.254/latest/meta-data/', /not allowed: private or special-purpose/],
  ['the metadata host name', 'http://metadata.google.internal/computeMetadata/v1/', /not allowed: internal host name/],
  ['a loopback address that is not allowed', (port) => `http://127.0.0.2:${port}/article`, /not allowed: private or special-purpose/],
  ['localhost', (port) => `http://localhost:${port}/article`, /not allowed: internal host name/],
  ['a private address', 'http://10.0.0.1/', /not allowed: private or special-purpose/],
  ['an IPv6 loopback', 'http://[::1]/', /not allowed/],
  ['an IPv4-mapped IPv6 address', 'http://[::ffff:169.254.169.254]/', /not allowed/],
  ['a redirect from the allowed host to a private address', '/to-private', /not allowed: private or special-purpose/],
  ['a redirect from the allowed host to the metadata address', '/to-metadata', /not allowed: private or special-purpose/],
  ['a redirect from the allowed host to another loopback address', '/to-other-loopback', /not allowed/],
  ['a redirect from the allowed host to localhost', '/to-localhost', /not allowed: internal host name/],
  ['a redirect loop', '/loop', /too many redirects/],
  ['a 3xx without a Location (304 Not Modified)', '/not-modified', /answered HTTP 304 \(a 3xx without a Location header to follow\)/],
  ['a file: URL', 'file:///etc/passwd', /not allowed: only http and https/],
  ['credentials in the URL', 'http://user:pass@127.0.0.1/', /not allowed: credentials/],
];

for (const [what, target, reason] of refusals) {
  test(`refuses ${what}`, async (t) => {
    const url = typeof target === 'function' ? target(site.port) : target.startsWith('/') ? site.url(target) : target;
    const result = await scrape(url);
    t.true(result.isError, result.text);
    t.regex(result.text, reason);
  });
}

test('follows a redirect within the allowed host and reports the final URL', async (t) => {
  const result = await scrape(site.url('/to-article'));
  t.falsy(result.isError, result.text);
  t.is(result.page.url, site.url('/to-article'));
  t.is(result.page.final_url, site.url('/article'));
  t.is(result.page.title, 'Otters of the Pacific');
});

test('refuses binary content, typed or sniffed', async (t) => {
  const typed = await scrape(site.url('/image.png'));
  t.true(typed.isError);
  t.regex(typed.text, /Binary content is not supported \(image\/png\)/);
  const sniffed = await scrape(site.url('/untyped-binary'));
  t.true(sniffed.isError);
  t.regex(sniffed.text, /Binary content/);
});

test('a type that merely begins like a text type (application/jsonx, application/xml-…) is refused as binary; real text types are read', async (t) => {
  for (const [path, mime] of [['/jsonx', 'application/jsonx'], ['/xml-suffixed', 'application/xml-dtd-whatever'], ['/javascript-archive', 'application/javascript-archive'], ['/json-then-more', 'application/vnd.otter+jsonx']]) {
    const result = await scrape(site.url(path!));
    t.true(result.isError, `${mime} was read as text: ${result.text}`);
    t.is(result.text, `Binary content is not supported (${mime}); scrape reads HTML and text pages`);
  }
  for (const [path, text] of [['/json', '{"otter": "raft"}'], ['/vendor-json', '{"data": "raft"}'], ['/csv', 'otter,raft'], ['/markdown', '# raft']]) {
    const result = await scrape(site.url(path!));
    t.falsy(result.isError, `${path} was refused: ${result.text}`);
    t.is(result.page.content, text);
  }
});

test('refuses a page larger than SCRAPE_MAX_BYTES while it streams', async (t) => {
  const result = await scrape(site.url('/huge'));
  t.true(result.isError);
  t.regex(result.text, /larger than 204800 bytes/);
});

test('the service still answers after every refusal', async (t) => {
  const result = await scrape(site.url('/article'));
  t.falsy(result.isError);
  t.regex(result.page.content, /rafting/);
});
