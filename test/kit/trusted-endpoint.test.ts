import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { answerEndlessJson, servedOnLoopback } from '../helpers/loopback-server.js';
import test, { type ExecutionContext } from 'ava';
import { createTrustedEndpoint, TrustedEndpointError } from '../../services/kit/index.js';

// The kit's client of operator-configured endpoints (search backends, embeddings, the remote
// sandbox, Keycloak), against a local HTTP server: the base URL join, headers, the timeout, the
// uniform errors, and an answer past the byte limit refused while it streams, not buffered whole.

const serve = async (t: ExecutionContext, handler: (req: IncomingMessage, res: ServerResponse) => void) => (await servedOnLoopback(t, handler)).origin;

async function bodyOf(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

test('paths are joined below the base URL (with or without its slash), with headers, query and a JSON body', async (t) => {
  const seen: Array<{ method: string; url: string; headers: IncomingMessage['headers']; body: string }> = [];
  const origin = await serve(t, async (req, res) => {
    seen.push({ method: req.method!, url: req.url!, headers: req.headers, body: await bodyOf(req) });
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
  });
  for (const baseUrl of [`${origin}/v1`, `${origin}/v1/`]) {
    const endpoint = createTrustedEndpoint({ name: 'Test', baseUrl, timeoutMs: 10_000, headers: { 'x-api-key': 'k' } });
    t.deepEqual(await endpoint.json('/search', { json: { q: 'otters' }, query: { page: '2', skip: undefined } }), { ok: true });
  }
  t.is(seen.length, 2);
  for (const request of seen) {
    t.is(request.method, 'POST');
    t.is(request.url, '/v1/search?page=2');
    t.is(request.headers['x-api-key'], 'k');
    t.is(request.headers['content-type'], 'application/json');
    t.is(request.headers.accept, 'application/json');
    t.is(request.body, '{"q":"otters"}');
  }
  const form = createTrustedEndpoint({ name: 'Test', baseUrl: origin, timeoutMs: 10_000 });
  const res = await form.request('token', { form: { grant_type: 'client_credentials' } });
  t.is(res.status, 200);
  t.is(seen[2]!.headers['content-type'], 'application/x-www-form-urlencoded');
  t.is(seen[2]!.body, 'grant_type=client_credentials');
});

test('a path that would leave the base URL (an absolute URL, dot segments, encoded or not) is refused before anything is sent', async (t) => {
  const seen: string[] = [];
  const origin = await serve(t, (req, res) => {
    seen.push(req.url!);
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
  });
  const elsewhere: string[] = [];
  const thief = await serve(t, (req, res) => {
    elsewhere.push(`${req.url} ${String(req.headers['x-api-key'])}`);
    res.writeHead(200, { 'content-type': 'application/json' }).end('{"stolen":true}');
  });
  const endpoint = createTrustedEndpoint({ name: 'Keyed', baseUrl: `${origin}/admin/realms/r`, timeoutMs: 10_000, headers: { 'x-api-key': 'the-key' } });
  // An id spelled `..` (or `%2e%2e`, which URL resolution reads alike) climbed to the realm itself.
  for (const path of ['/users/..', 'users/%2e%2e', 'users/%2E%2e/logout', 'users\\..\\..', 'users/../../other', `${thief}/steal`, 'https://example.invalid/x']) {
    const error = await t.throwsAsync(endpoint.request(path, { method: 'PUT', json: { enabled: false } }), { instanceOf: TypeError }, path);
    t.regex(error!.message, /^Keyed: the path .* leaves the endpoint's base URL$/, path);
    t.false(error!.message.includes('the-key'));
  }
  t.deepEqual(seen, []);
  t.deepEqual(elsewhere, []);
  // What stays below it is sent as before, dots inside a name included.
  t.deepEqual(await endpoint.json('users/a..b', { query: { q: '..' } }), { ok: true });
  t.deepEqual(seen, ['/admin/realms/r/users/a..b?q=..']);
});

test('a refusal, a body that is not JSON and an outage are errors that name the endpoint', async (t) => {
  const origin = await serve(t, (req, res) => {
    if (req.url === '/refused') res.writeHead(503, { 'content-type': 'application/json' }).end('{"error":"down"}');
    else res.writeHead(200, { 'content-type': 'text/html' }).end('<html></html>');
  });
  const endpoint = createTrustedEndpoint({ name: 'Test backend', baseUrl: origin, timeoutMs: 10_000 });
  const refused = await t.throwsAsync(endpoint.json('refused'), { instanceOf: TrustedEndpointError });
  t.like(refused, { failure: 'status', status: 503, message: 'Test backend answered HTTP 503' });
  // `request` hands any answer over, with its (bounded) body.
  const answer = await endpoint.request('refused');
  t.like(answer, { status: 503, ok: false, text: '{"error":"down"}' });
  const html = await t.throwsAsync(endpoint.json('page'), { instanceOf: TrustedEndpointError });
  t.like(html, { failure: 'not_json', message: 'Test backend answered with a body that is not JSON' });

  const closed = createServer();
  closed.listen(0, '127.0.0.1');
  await once(closed, 'listening');
  const port = (closed.address() as AddressInfo).port;
  closed.close();
  await once(closed, 'close');
  const down = createTrustedEndpoint({ name: 'Test backend', baseUrl: `http://127.0.0.1:${port}`, timeoutMs: 10_000 });
  const unreachable = await t.throwsAsync(down.json('x'), { instanceOf: TrustedEndpointError });
  t.like(unreachable, { failure: 'unreachable', message: 'Test backend could not be reached (network error)' });
});

test('the timeout covers the answer, and the caller’s own cancellation is thrown as it is', async (t) => {
  const origin = await serve(t, (req, res) => {
    // Headers at once, then a body that never ends: only the timeout stops the read.
    if (req.url === '/slow-body') res.writeHead(200, { 'content-type': 'application/json' }).write('{"a":');
  });
  const endpoint = createTrustedEndpoint({ name: 'Test backend', baseUrl: origin, timeoutMs: 150 });
  const silent = await t.throwsAsync(endpoint.json('silent'), { instanceOf: TrustedEndpointError });
  t.like(silent, { failure: 'timeout', message: 'Test backend could not be reached (timed out)' });
  const slow = await t.throwsAsync(endpoint.json('slow-body'), { instanceOf: TrustedEndpointError });
  t.is(slow!.failure, 'timeout');

  const caller = new AbortController();
  const reason = new Error('the client left');
  const pending = endpoint.json('silent', { signal: caller.signal, timeoutMs: 10_000 });
  caller.abort(reason);
  t.is(await t.throwsAsync(pending), reason);
});

test('an answer past the byte limit is refused while it streams (the rest is never read), or before reading when its length says so', async (t) => {
  let answer: ReturnType<typeof answerEndlessJson> | null = null;
  const origin = await serve(t, (req, res) => {
    if (req.url === '/declared') {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(10 * 1024 * 1024) });
      res.write('[');
      return;
    }
    answer = answerEndlessJson(res, '[');
  });
  const endpoint = createTrustedEndpoint({ name: 'Test backend', baseUrl: origin, timeoutMs: 10_000, maxBytes: 256 * 1024 });
  const endless = await t.throwsAsync(endpoint.json('endless'), { instanceOf: TrustedEndpointError });
  t.like(endless, { failure: 'too_large', status: 200, message: 'Test backend answered with more than 262144 bytes' });
  await answer!.closed;
  t.true(answer!.written() < 16 * 1024 * 1024, `${answer!.written()} bytes written before the client let go`);

  const declared = await t.throwsAsync(endpoint.request('declared'), { instanceOf: TrustedEndpointError });
  t.is(declared!.failure, 'too_large');
});

test('an answer within the limit is read whole, however it is split', async (t) => {
  const items = Array.from({ length: 5000 }, (_, i) => ({ i, text: 'é'.repeat(10) }));
  const origin = await serve(t, (_req, res) => {
    const text = Buffer.from(JSON.stringify(items), 'utf8');
    res.writeHead(200, { 'content-type': 'application/json' });
    // Split in the middle of a two-byte character, and in small pieces.
    for (let at = 0; at < text.length; at += 4097) res.write(text.subarray(at, at + 4097));
    res.end();
  });
  const endpoint = createTrustedEndpoint({ name: 'Test backend', baseUrl: origin, timeoutMs: 5000, maxBytes: 1024 * 1024 });
  t.deepEqual(await endpoint.json(''), items);
});
