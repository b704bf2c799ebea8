import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import test from 'ava';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { setEgressResolver } from '../../services/kit/index.js';
import { chunkText } from '../../services/mcp-tools/file-search/chunking.js';
import { startMcpPlatform, startSite, ARTICLE_HTML, type McpPlatform } from '../mcp/helpers.js';

// Found by the audit of the MCP Tools API, each through the edge as a client meets it:
// - scrape's SCRAPE_TIMEOUT_MS bounds the whole fetch, so an upstream that drips its body a byte
//   at a time (slow loris), or a name server that never answers, cannot hold a call, and its
//   concurrency slot, for as long as it likes;
// - reading a page (Readability on a DOM, synchronous and superlinear in the page) runs off the
//   service's thread and is given up at SCRAPE_TIMEOUT_MS: a small deeply nested page cannot stop
//   every other request of the process;
// - max_chars never cuts a character in half, nor does chunking for file search;
// - a page that declares UTF-16 is read as text, not refused as binary;
// - a page compressed although scrape asked for no compression is read (its inflated size bounded
//   by SCRAPE_MAX_BYTES), not refused as binary;
// - JSON holding a string the platform refuses (NUL, unpaired surrogate) is invalid params naming
//   the field, with the request's id: not a parse error (it is JSON) without an id;
// - a body not declared as JSON is a 415 whatever it holds, as docs/mcp.md's table says.
let p: McpPlatform;
let site: Awaited<ReturnType<typeof startSite>>;
let key: string;

/** A server that sends its headers, then one byte every `everyMs`, `drips` times, then ends. */
async function startDripServer(drips: number, everyMs: number) {
  let closed: (sent: number) => void;
  /** Settles with the bytes sent when the client closed the connection (`drips` if it never did). */
  const closedAfter = new Promise<number>((resolve) => (closed = resolve));
  const server = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    let sent = 0;
    const timer = setInterval(() => {
      res.write('x');
      if (++sent >= drips) {
        clearInterval(timer);
        res.end();
      }
    }, everyMs);
    res.on('close', () => {
      clearInterval(timer);
      closed(sent);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/drip`,
    closedAfter,
    close: () => {
      server.closeAllConnections();
      server.close();
    },
  };
}

// The DNS server is a third party: one name's lookup hangs until the file ends (the guard's test hook).
const SLOW_NAME = 'slow-dns.example.test';
const slowLookups: Array<() => void> = [];

test.before(async () => {
  setEgressResolver((hostname) =>
    hostname === SLOW_NAME
      ? new Promise((resolve) => slowLookups.push(() => resolve([])))
      : Promise.reject(Object.assign(new Error(`${hostname} does not resolve`), { code: 'ENOTFOUND' })),
  );
  site = await startSite({
    '/emoji': { type: 'text/plain; charset=utf-8', body: '😀'.repeat(200) },
    '/utf16': { type: 'text/plain; charset=utf-16le', body: Buffer.from('Sea otters hold hands.', 'utf16le') },
    '/gzip': { type: 'text/html; charset=utf-8', body: gzipSync(ARTICLE_HTML), headers: { 'content-encoding': 'gzip' } },
    '/br': { type: 'text/html', body: brotliCompressSync(ARTICLE_HTML), headers: { 'content-encoding': 'br' } },
    '/deflate': { type: 'text/html', body: deflateSync(ARTICLE_HTML), headers: { 'content-encoding': 'deflate' } },
    // 100 KiB on the wire, 64 MiB inflated.
    '/bomb': { type: 'text/plain', body: gzipSync(Buffer.alloc(64 * 1024 * 1024, 'a')), headers: { 'content-encoding': 'gzip' } },
    '/zstd': { type: 'text/html', body: 'not really zstd', headers: { 'content-encoding': 'zstd' } },
  });
  p = await startMcpPlatform({ EGRESS_ALLOW_HOSTS: '127.0.0.1', SCRAPE_TIMEOUT_MS: '3000', SCRAPE_MAX_BYTES: '1mb' });
  ({ key } = await p.newUser());
});
test.after.always(async () => {
  for (const release of slowLookups) release();
  setEgressResolver(null);
  await p?.stop();
  await site?.close();
});

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

test('scrape: an upstream dripping its body a byte at a time is cut off at SCRAPE_TIMEOUT_MS, not when it chooses to end', async (t) => {
  // 400 bytes, one every 50 ms: never idle for the socket timeout, 20 s in all.
  const drip = await startDripServer(400, 50);
  try {
    const client = await p.client(key);
    const result: any = await client.callTool({ name: 'scrape', arguments: { url: drip.url } });
    t.true(result.isError, JSON.stringify(result.content));
    t.regex(result.content[0].text, /did not answer within 3000 ms/);
    // The fetch was abandoned: the upstream saw its connection closed before its last byte.
    t.true((await drip.closedAfter) < 400, 'closed before its last byte');
  } finally {
    drip.close();
  }
});

test('scrape: a host name whose lookup never ends is given up at SCRAPE_TIMEOUT_MS', async (t) => {
  const client = await p.client(key);
  const result: any = await client.callTool({ name: 'scrape', arguments: { url: `http://${SLOW_NAME}/page` } });
  t.true(result.isError, JSON.stringify(result.content));
  t.regex(result.content[0].text, /did not answer within 3000 ms/);
  t.true(slowLookups.length > 0, 'the name was looked up');
});

test('scrape: a page too complex to read in time is given up at SCRAPE_TIMEOUT_MS, and other requests are answered meanwhile', async (t) => {
  // 16 KiB of nested elements: reading it takes Readability tens of seconds.
  const depth = 1500;
  const html = `<!doctype html><html><head><title>Deep</title></head><body>${'<div>'.repeat(depth)}deep text${'</div>'.repeat(depth)}</body></html>`;
  let served!: () => void;
  const pageSent = new Promise<void>((resolve) => (served = resolve));
  const server = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html' }).end(html);
    res.on('finish', served);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    // A user of its own: one user's pages are read one at a time (one of the two reading threads),
    // so this page, held for the whole bound, would make the other tests' pages of `key` wait it out.
    const { key: ownKey } = await p.newUser();
    const client = await p.client(ownKey);
    let scrapeAnswered = false;
    const scraping = client.callTool({ name: 'scrape', arguments: { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/deep` } }).finally(() => (scrapeAnswered = true));
    await pageSent;
    const list = await p.rpc(ownKey, { jsonrpc: '2.0', id: 1, method: 'tools/list' });
    t.is(list.status, 200);
    t.is(list.json.result.tools.length, 5);
    t.false(scrapeAnswered, 'tools/list was answered while the page was being read');
    const result: any = await scraping;
    t.true(result.isError, JSON.stringify(result.content).slice(0, 200));
    t.regex(result.content[0].text, /too complex to read within 3000 ms/);
  } finally {
    server.closeAllConnections();
    server.close();
  }
});

test('scrape: max_chars never cuts a character in half', async (t) => {
  const client = await p.client(key);
  const result: any = await client.callTool({ name: 'scrape', arguments: { url: site.url('/emoji'), format: 'text', max_chars: 101 } });
  t.falsy(result.isError, JSON.stringify(result.content));
  const page = result.structuredContent;
  t.true(page.truncated);
  t.false(LONE_SURROGATE.test(page.content), 'no half of a surrogate pair');
  t.is(page.content, '😀'.repeat(50));
});

test('scrape: a page declaring UTF-16 is read as text, not refused as binary', async (t) => {
  const client = await p.client(key);
  const result: any = await client.callTool({ name: 'scrape', arguments: { url: site.url('/utf16') } });
  t.falsy(result.isError, JSON.stringify(result.content));
  t.is(result.structuredContent.content, 'Sea otters hold hands.');
});

test('scrape: a page compressed anyway (gzip, br, deflate) is read; its inflated size is bounded; an unknown coding is named', async (t) => {
  const client = await p.client(key);
  for (const path of ['/gzip', '/br', '/deflate']) {
    const result: any = await client.callTool({ name: 'scrape', arguments: { url: site.url(path) } });
    t.falsy(result.isError, `${path}: ${JSON.stringify(result.content)}`);
    t.is(result.structuredContent.title, 'Otters of the Pacific', path);
    t.regex(result.structuredContent.content, /hold hands while they sleep/, path);
  }
  const bomb: any = await client.callTool({ name: 'scrape', arguments: { url: site.url('/bomb') } });
  t.true(bomb.isError);
  t.regex(bomb.content[0].text, /larger than 1048576 bytes/);
  const unknown: any = await client.callTool({ name: 'scrape', arguments: { url: site.url('/zstd') } });
  t.true(unknown.isError);
  t.regex(unknown.content[0].text, /compressed with "zstd"/);
});

test('file search chunks of text without spaces never split a character in half', (t) => {
  const chunks = chunkText('😀'.repeat(1000), 301, 60);
  t.true(chunks.length > 3);
  for (const chunk of chunks) t.false(LONE_SURROGATE.test(chunk), `chunk of ${chunk.length} units`);
  t.is(chunks.join('').replace(/😀/g, ''), '', 'only whole characters');
});

const callWithStdin = (id: number | string, stdinJson: string) =>
  `{"jsonrpc":"2.0","id":${JSON.stringify(id)},"method":"tools/call","params":{"name":"python_exec","arguments":{"code":"print(1)","stdin":${stdinJson}}}}`;

test('a NUL or an unpaired surrogate in an argument is invalid params naming the field, with the request id', async (t) => {
  for (const bad of ['"a\\u0000b"', '"a\\ud800b"']) {
    const answer = await p.rpc(key, callWithStdin(7, bad));
    t.is(answer.status, 200, answer.text);
    t.is(answer.json.jsonrpc, '2.0');
    t.is(answer.json.id, 7, 'the id is echoed so the client can match the answer');
    t.is(answer.json.error.code, -32602, answer.text);
    t.is(answer.json.error.data.param, 'params.arguments.stdin');
    t.regex(answer.json.error.message, /params\.arguments\.stdin/);
  }
  // A reserved key is refused the same way.
  const proto = await p.rpc(key, '{"jsonrpc":"2.0","id":"p","method":"tools/call","params":{"name":"file_search_index","arguments":{"text":"x","metadata":{"__proto__":{"a":1}}}}}');
  t.like(proto.json, { id: 'p', error: { code: -32602, data: { param: 'params.arguments.metadata.__proto__' } } });
  // Behind a byte order mark (which the body reader skips) the refused value is judged the same way.
  const marked = await p.rpc(key, `\ufeff${callWithStdin(8, '"a\\u0000b"')}`);
  t.like(marked.json, { id: 8, error: { code: -32602, data: { param: 'params.arguments.stdin' } } }, marked.text);
  // Text that is not JSON stays a parse error.
  const broken = await p.rpc(key, '{"jsonrpc":"2.0","id":1,"method":"ping"');
  t.is(broken.status, 400);
  t.like(broken.json, { id: null, error: { code: -32700 } });
});

test('in a batch only the member holding the refused value gets the error; the others are served', async (t) => {
  const answer = await p.rpc(key, `[{"jsonrpc":"2.0","id":1,"method":"ping"},${callWithStdin(2, '"\\u0000"')}]`);
  t.is(answer.status, 200, answer.text);
  t.true(Array.isArray(answer.json));
  const byId = new Map((answer.json as any[]).map((a) => [a.id, a]));
  t.deepEqual(byId.get(1).result, {});
  t.like(byId.get(2), { error: { code: -32602, data: { param: 'params.arguments.stdin' } } });
  // A refused value outside params (the id itself) makes the message an invalid request.
  const badId = await p.rpc(key, '{"jsonrpc":"2.0","id":"a\\u0000","method":"ping"}');
  t.is(badId.status, 400);
  t.like(badId.json, { id: null, error: { code: -32600 } });
  // A notification or a response holding one has no answer to carry an error: it goes no further.
  const notification = await p.rpc(key, '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"\\u0000"}}');
  t.is(notification.status, 202);
  t.is(notification.text, '');
  const withNotification = await p.rpc(key, '[{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"\\u0000"}},{"jsonrpc":"2.0","id":3,"result":{"x":"\\u0000"}},{"jsonrpc":"2.0","id":4,"method":"ping"}]');
  t.is(withNotification.status, 200, withNotification.text);
  t.deepEqual(withNotification.json, [{ jsonrpc: '2.0', id: 4, result: {} }]);
});

test('the SDK client gets that refusal as a JSON-RPC error naming the field, not an HTTP failure', async (t) => {
  const client = await p.client(key);
  const error = await t.throwsAsync(client.callTool({ name: 'python_exec', arguments: { code: 'print(1)', stdin: 'a\u0000b' } }));
  t.true(error instanceof McpError, `${error?.constructor.name}: ${error?.message}`);
  t.is((error as McpError).code, -32602);
  t.regex(error!.message, /params\.arguments\.stdin/);
});

test('a body not declared as JSON is 415 whatever it holds, not a parse or invalid-request error', async (t) => {
  for (const [contentType, body] of [
    ['text/plain', 'hello'],
    ['text/plain', '{"hello":"world"}'],
    ['application/x-www-form-urlencoded', 'jsonrpc=2.0&id=1&method=ping'],
    ['application/jsonp', '[]'],
  ] as const) {
    const answer = await p.rpc(key, body, { 'content-type': contentType });
    t.is(answer.status, 415, `${contentType} ${body}: ${answer.text}`);
    t.like(answer.json, { jsonrpc: '2.0', id: null, error: { code: -32000 } });
    t.regex(answer.json.error.message, /Content-Type must be application\/json/);
  }
  const none = await fetch(`${p.url}/v1/mcp`, { method: 'POST', headers: { 'x-api-key': key }, body: 'not json' });
  t.is(none.status, 415);
  // A JSON type with parameters is JSON.
  const withCharset = await p.rpc(key, { jsonrpc: '2.0', id: 1, method: 'ping' }, { 'content-type': 'application/json; charset=utf-8' });
  t.is(withCharset.status, 200);
  t.deepEqual(withCharset.json.result, {});
});
