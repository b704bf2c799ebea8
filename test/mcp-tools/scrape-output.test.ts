import test from 'ava';
import { startMcpPlatform, startSite, type McpPlatform } from '../mcp/helpers.js';

// What scrape returns, found by the audit:
// - in the Markdown of a hostile page an image keeps only a web address (made absolute like a
//   link's), never a javascript: address, nor a data: URL filling the content with base64;
// - text that is not HTML (source, YAML, TSV) is returned as it is: its indentation and tabs were
//   collapsed to single spaces and each line trimmed, which changes what YAML or Python means;
// - a page declaring its encoding only in a <meta> (windows-1252, Shift_JIS) was read as UTF-8.
let p: McpPlatform;
let site: Awaited<ReturnType<typeof startSite>>;
let key: string;

const BASE64 = Buffer.alloc(3000, 7).toString('base64');
const PAGE = `<!doctype html><html><head><title>Otter pictures</title></head><body><article>
<h1>Otter pictures</h1>
<p>Sea otters hold hands while they sleep so that they do not drift apart. This behaviour is called rafting,
and groups of otters resting together can number in the hundreds along the kelp forests of the Pacific coast.</p>
<p><img src="javascript:alert(document.cookie)" alt="scripted"> <img src="data:image/png;base64,${BASE64}" alt="inline">
<img src="/pictures/raft.png" alt="a raft of otters"> <img src="https://images.example.org/otter.jpg" alt="[an] otter"></p>
<p>They use stones as tools to crack open shellfish, one of the few mammals other than primates known to do so.</p>
</article></body></html>`;

const LEGACY_PAGE = (meta: string, text: string) =>
  `<!doctype html><html><head>${meta}<title>Legacy</title></head><body><p>${text}</p></body></html>`;
// "ラッコ" (sea otter) in Shift_JIS, as the page's text.
const SJIS_OTTER = Buffer.from([0x83, 0x89, 0x83, 0x62, 0x83, 0x52]);
const PYTHON = 'def otter(n):\n    if n:\n        return  "raft"\n\n\n\n    return None\n';
const YAML = 'otters:\n  - name: Ada\n    stones: 2\n  - name: Bo\n';
const TSV = 'name\tstones\n\tAda\t2\nBo\t\t3\n';

test.before(async () => {
  site = await startSite({
    '/pictures': { type: 'text/html; charset=utf-8', body: PAGE },
    '/script.py': { type: 'text/x-python', body: PYTHON.replace(/\n/g, '\r\n') },
    '/config.yaml': { type: 'application/yaml', body: YAML },
    '/table.tsv': { type: 'text/tab-separated-values', body: TSV },
    '/latin': { type: 'text/html', body: Buffer.from(LEGACY_PAGE('<meta charset="windows-1252">', 'Caf\u00e9 cr\u00e8me, na\u00efve otters'), 'latin1') },
    '/sjis': { type: 'text/html', body: Buffer.concat(LEGACY_PAGE('<meta http-equiv="Content-Type" content="text/html; charset=Shift_JIS">', '\u0000').split('\u0000').flatMap((part, i) => (i ? [SJIS_OTTER, Buffer.from(part)] : [Buffer.from(part)]))) },
    '/header-wins': { type: 'text/html; charset=utf-8', body: LEGACY_PAGE('<meta charset="windows-1252">', 'Caf\u00e9 stays UTF-8') },
  });
  p = await startMcpPlatform({ EGRESS_ALLOW_HOSTS: '127.0.0.1' });
  ({ key } = await p.newUser());
});
test.after.always(async () => {
  await p?.stop();
  await site?.close();
});

test('scrape keeps web images (absolute), and only the alt text of javascript: and data: images', async (t) => {
  const client = await p.client(key);
  const result = (await client.callTool({ name: 'scrape', arguments: { url: site.url('/pictures'), format: 'markdown' } })) as any;
  t.falsy(result.isError, JSON.stringify(result));
  const content: string = result.structuredContent.content;
  t.regex(content, /Sea otters hold hands/);
  t.false(content.includes('javascript:'), content);
  t.false(content.includes('data:image'), 'no data: URL');
  t.false(content.includes(BASE64.slice(0, 40)), 'no base64 in the content');
  t.regex(content, /scripted/);
  t.regex(content, /inline/);
  t.true(content.includes(`![a raft of otters](${site.url('/pictures/raft.png')})`), content);
  t.true(content.includes('![\\[an\\] otter](https://images.example.org/otter.jpg)'), content);
});

test('scrape returns a text resource as it is: indentation, tabs and blank lines kept, CRLF read as LF', async (t) => {
  const client = await p.client(key);
  for (const [path, body] of [['/script.py', PYTHON], ['/config.yaml', YAML], ['/table.tsv', TSV]] as const) {
    const result = (await client.callTool({ name: 'scrape', arguments: { url: site.url(path), format: 'text' } })) as any;
    t.falsy(result.isError, JSON.stringify(result));
    t.is(result.structuredContent.content, body, path);
    t.false(result.structuredContent.truncated);
  }
});

test('scrape reads a page in the encoding its <meta> declares when the header names none; a header charset wins', async (t) => {
  const client = await p.client(key);
  const read = async (path: string) => ((await client.callTool({ name: 'scrape', arguments: { url: site.url(path), format: 'text' } })) as any).structuredContent.content as string;
  const latin = await read('/latin');
  t.regex(latin, /Café crème, naïve otters/, latin);
  const sjis = await read('/sjis');
  t.regex(sjis, /ラッコ/, sjis);
  const utf8 = await read('/header-wins');
  t.regex(utf8, /Café stays UTF-8/, utf8);
});
