import { lookup } from 'node:dns/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { hostname } from 'node:os';
import test from 'ava';
import { reliabilityFigures } from '../helpers/reliability-figures.js';
import { startMcpPlatform, type McpPlatform } from '../mcp/helpers.js';

// Server-side request forgery through the edge, on every feature that fetches a user-supplied URL:
// media URL uploads, the scrape tool (MCP) and webhook URLs. Each is aimed at loopback, private,
// link-local and metadata addresses, in decimal, octal, hexadecimal, short and IPv4-mapped IPv6
// spellings, at names that resolve there, and (media, scrape) through a redirect from an allowed
// host. Every attempt is refused, and a canary server on the loopback address never sees a request.
const figures = reliabilityFigures('ssrf');
const row = figures.row('SSRF attempts through the edge');

let p: McpPlatform;
let key: string;
let canaryHits = 0;
let canary: http.Server;
let redirector: http.Server;
let canaryPort: number;
let redirectorPort: number;

const listen = (server: http.Server, host: string) =>
  new Promise<number>((resolve) => server.listen(0, host, () => resolve((server.address() as AddressInfo).port)));

test.before(async () => {
  canary = http.createServer((_req, res) => {
    canaryHits++;
    res.writeHead(200, { 'content-type': 'image/png' }).end('canary');
  });
  canaryPort = await listen(canary, '127.0.0.1');
  // The allowed host: it redirects to whatever `?to=` names.
  redirector = http.createServer((req, res) => {
    const to = new URL(req.url ?? '/', 'http://x').searchParams.get('to') ?? '/';
    res.writeHead(302, { location: to }).end();
  });
  redirectorPort = await listen(redirector, '127.0.0.2');
  p = await startMcpPlatform({ EGRESS_ALLOW_HOSTS: '127.0.0.2' });
  ({ key } = await p.newUser());
});
test.after.always(async () => {
  figures.write();
  await p?.stop();
  canary?.close();
  redirector?.close();
});

async function targets(): Promise<Array<[string, string]>> {
  const c = canaryPort;
  const list: Array<[string, string]> = [
    ['loopback', `http://127.0.0.1:${c}/x.png`],
    ['loopback, decimal', `http://2130706433:${c}/x.png`],
    ['loopback, octal', `http://0177.0.0.1:${c}/x.png`],
    ['loopback, hexadecimal', `http://0x7f000001:${c}/x.png`],
    ['loopback, short form', `http://127.1:${c}/x.png`],
    ['loopback, IPv4-mapped IPv6', `http://[::ffff:127.0.0.1]:${c}/x.png`],
    ['loopback, IPv6', `http://[::1]:${c}/x.png`],
    ['unspecified address', `http://0.0.0.0:${c}/x.png`],
    ['private 10/8', 'http://10.0.0.1/x.png'],
    ['private 172.16/12', 'http://172.16.0.1/x.png'],
    ['private 192.168/16', 'http://192.168.1.1/x.png'],
    ['link-local', 'http://169.254.1.1/x.png'],
    ['metadata address', 'http://169.254.169.254/latest/meta-data/'],
    ['metadata, decimal', 'http://2852039166/latest/meta-data/'],
    ['metadata, IPv4-mapped IPv6', 'http://[::ffff:a9fe:a9fe]/latest/meta-data/'],
    ['metadata host name', 'http://metadata.google.internal/computeMetadata/v1/'],
    ['localhost', `http://localhost:${c}/x.png`],
  ];
  // This machine's own name, when it resolves to a loopback or private address (a DNS name that points inside).
  const own = await lookup(hostname()).catch(() => null);
  if (own && /^(127\.|10\.|192\.168\.|::1$)/.test(own.address)) list.push(['a host name resolving to loopback', `http://${hostname()}:${c}/x.png`]);
  return list;
}

const viaRedirect = (url: string) => `http://127.0.0.2:${redirectorPort}/go?to=${encodeURIComponent(url)}`;

test('media URL uploads, scrape and webhook URLs refuse every internal destination, directly and through redirects', async (t) => {
  const list = await targets();
  const scrapeClient = await p.client(key);
  const accepted: string[] = [];
  const count = (family: string) => {
    row.badInputs[family] = (row.badInputs[family] ?? 0) + 1;
    row.requestsChecked++;
  };

  // The redirector itself is reachable (allowed), so a refusal below is the guard's doing.
  const allowed = await p.api(key, 'POST', '/v1/media/upload', { source: { type: 'url', url: viaRedirect('http://127.0.0.2:1/none.png') } });
  t.is(allowed.status, 400);

  for (const [what, url] of list) {
    for (const [how, target] of [['direct', url], ['redirect', viaRedirect(url)]] as const) {
      const media = await p.api(key, 'POST', '/v1/media/upload', { source: { type: 'url', url: target } });
      count('media URL upload');
      if (media.status !== 400 || media.json?.error?.param !== 'source.url') accepted.push(`media ${how} ${what}: ${media.status} ${JSON.stringify(media.json)}`);
      if (media.status >= 500) row.fiveXx++;

      const scraped: any = await scrapeClient.callTool({ name: 'scrape', arguments: { url: target } });
      count('scrape tool');
      if (!scraped.isError || !/not allowed|too many redirects/.test(scraped.content?.[0]?.text ?? '')) accepted.push(`scrape ${how} ${what}: ${JSON.stringify(scraped).slice(0, 200)}`);
    }
    const hook = await p.api(p.adminKey, 'POST', '/v1/admin/webhooks', { url, events: ['*'] });
    count('webhook URL');
    if (hook.status !== 400 || hook.json?.error?.param !== 'url') accepted.push(`webhook ${what}: ${hook.status} ${JSON.stringify(hook.json)}`);
    if (hook.status >= 500) row.fiveXx++;
  }
  t.deepEqual(accepted, []);
  t.is(canaryHits, 0, 'no request reached the loopback canary');
  t.log(`${list.length} destinations × (media, scrape) × (direct, redirect) + webhooks: ${row.requestsChecked} attempts refused`);
});
