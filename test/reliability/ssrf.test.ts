import { lookup } from 'node:dns/promises';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { hostname } from 'node:os';
import test from 'ava';
import { blockedReason, setEgressResolver, type Resolver } from '../../services/kit/egress.js';
import { reliabilityFigures } from '../helpers/reliability-figures.js';
import { startMcpPlatform, type McpPlatform } from '../mcp/helpers.js';

// Server-side request forgery through the edge, on every feature that fetches a user-supplied URL:
// media URL uploads, the scrape tool (MCP) and webhook URLs. Each is aimed at loopback, private,
// link-local and metadata addresses, in decimal, octal, hexadecimal, short and IPv4-mapped IPv6
// spellings, at names that resolve there, and (media, scrape) through a redirect from an allowed
// host. Every attempt is refused, and a canary server on the loopback address never sees a request.
// Names that resolve inside: those of /etc/hosts and this machine's own name (the system resolver,
// no outside DNS needed), and names a stub DNS answers (the DNS server is a third party, so it is
// stubbed through the guard's process resolver: `*.example.test` → private, metadata, loopback and
// IPv4-mapped loopback addresses, one name with a public and a loopback answer). Refusals of those
// names must come from the resolved address, not from the name.
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

/** What a DNS server would answer for names pointing inside; any other name goes to the system resolver. */
const STUB_DNS: Record<string, string[]> = {
  'internal.example.test': ['10.0.0.5'],
  'metadata.example.test': ['169.254.169.254'],
  'canary.example.test': ['127.0.0.1'],
  'mapped-canary.example.test': ['::ffff:127.0.0.1'],
  'mixed.example.test': ['93.184.216.34', '127.0.0.1'],
};
const stubDns: Resolver = async (host) => {
  const answers = STUB_DNS[host];
  if (!answers) return lookup(host, { all: true, verbatim: true });
  return answers.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
};

/** Names /etc/hosts points at loopback or private addresses (localhost aside: it is refused by name). */
function hostsFileNames(): string[] {
  const names = new Set<string>();
  for (const line of readFileSync('/etc/hosts', 'utf8').split('\n')) {
    const [address, ...aliases] = line.replace(/#.*/, '').trim().split(/\s+/);
    if (!address || !blockedReason(address)) continue;
    for (const name of aliases) if (name && !/(^|\.)localhost$|^ip6-/.test(name)) names.add(name);
  }
  return [...names];
}

test.before(async () => {
  setEgressResolver(stubDns);
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
  setEgressResolver(null);
  figures.write();
  await p?.stop();
  canary?.close();
  redirector?.close();
});

/** Targets whose host is a name that only its resolved address makes internal (not the name lists). */
const resolvedNames = new Set<string>();

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
  const byName = (what: string, url: string) => {
    list.push([what, url]);
    resolvedNames.add(what);
  };
  // This machine's own name, when it resolves to a loopback or private address (a DNS name that points inside).
  const own = await lookup(hostname()).catch(() => null);
  if (own && blockedReason(own.address)) byName('this machine\'s name, resolving to loopback', `http://${hostname()}:${c}/x.png`);
  for (const name of hostsFileNames()) if (name !== hostname()) byName(`/etc/hosts name ${name}`, `http://${name}:${c}/x.png`);
  byName('stub DNS name → 10.0.0.5', 'http://internal.example.test/x.png');
  byName('stub DNS name → 169.254.169.254', 'http://metadata.example.test/latest/meta-data/');
  byName('stub DNS name → 127.0.0.1', `http://canary.example.test:${c}/x.png`);
  byName('stub DNS name → ::ffff:127.0.0.1', `http://mapped-canary.example.test:${c}/x.png`);
  byName('stub DNS name → a public and a loopback address', `http://mixed.example.test:${c}/x.png`);
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
      // A name refused for where it resolves, not for how it is spelled.
      else if (resolvedNames.has(what) && !/resolves to/.test(media.json.error.message)) accepted.push(`media ${how} ${what} refused for another reason: ${media.json.error.message}`);
      if (media.status >= 500) row.fiveXx++;

      const scraped: any = await scrapeClient.callTool({ name: 'scrape', arguments: { url: target } });
      count('scrape tool');
      if (!scraped.isError || !/not allowed|too many redirects/.test(scraped.content?.[0]?.text ?? '')) accepted.push(`scrape ${how} ${what}: ${JSON.stringify(scraped).slice(0, 200)}`);
    }
    const hook = await p.api(p.adminKey, 'POST', '/v1/admin/webhooks', { url, events: ['*'] });
    count('webhook URL');
    if (hook.status !== 400 || hook.json?.error?.param !== 'url') accepted.push(`webhook ${what}: ${hook.status} ${JSON.stringify(hook.json)}`);
    else if (resolvedNames.has(what) && !/resolves to/.test(hook.json.error.message)) accepted.push(`webhook ${what} refused for another reason: ${hook.json.error.message}`);
    if (hook.status >= 500) row.fiveXx++;
  }
  t.deepEqual(accepted, []);
  t.is(canaryHits, 0, 'no request reached the loopback canary');
  t.log(`${list.length} destinations × (media, scrape) × (direct, redirect) + webhooks: ${row.requestsChecked} attempts refused`);
});
