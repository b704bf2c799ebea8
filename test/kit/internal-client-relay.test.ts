import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { servedOnLoopback } from '../helpers/loopback-server.js';
import test from 'ava';
import { ApiError, createInternalClient, relayError, resolveMediaReferences, type Principal } from '../../services/kit/index.js';

// The kit's internal client as every caller uses it: an address asked at each call (known only
// once the other service listens), one way to turn the other service's error answer into this
// service's error, and the one call of media-api's resolve shared by llm-api and response-api.

const principal: Principal = { userId: 'user_abc', subject: 'user_abc', email: null, username: null, authMethod: 'jwt', isAdmin: false, isGuest: false };

function thrown(fn: () => never): ApiError {
  try {
    fn();
  } catch (error) {
    if (error instanceof ApiError) return error;
    throw error;
  }
  throw new Error('nothing was thrown');
}

test('a refusal keeps its status, message, code, param and when to retry; anything else is a 502 with the message', (t) => {
  const refusal = thrown(() =>
    relayError(
      { status: 429, body: { error: { message: 'Slow down', code: 'rate_limit_exceeded', param: 'model' } }, headers: { 'retry-after': '3', 'x-other': 'no' } },
      { what: 'The chat completion' },
    ),
  );
  t.like(refusal, { status: 429, message: 'Slow down', code: 'rate_limit_exceeded', param: 'model' });
  t.is(refusal.headers['retry-after'], '3');
  t.false('x-other' in refusal.headers);

  const failure = thrown(() => relayError({ status: 500, body: { error: { message: 'The model provider failed' } } }, { what: 'The chat completion' }));
  t.like(failure, { status: 502, message: 'The model provider failed', code: 'upstream_error', param: null });

  // A streamed call's error answer is text; one that is not JSON gets the fallback message.
  const text = thrown(() => relayError({ status: 404, body: '{"error":{"message":"No such conversation"}}' }, { what: 'Reading the conversation' }));
  t.like(text, { status: 404, message: 'No such conversation' });
  const garbage = thrown(() => relayError({ status: 503, body: '<html>' }, { what: 'Starting the research', param: 'deep_research' }));
  t.like(garbage, { status: 502, message: 'Starting the research failed (503)', param: 'deep_research' });
});

test('`param` names this service’s field, and `statuses` narrows what is passed on', (t) => {
  const named = thrown(() => relayError({ status: 400, body: { error: { message: 'bad', param: 'payload' } } }, { what: 'x', param: 'input' }));
  t.like(named, { status: 400, param: 'input' });
  const narrowed = thrown(() => relayError({ status: 401, body: { error: { message: 'no token' } } }, { what: 'x', param: 'input', statuses: [400, 404, 413] }));
  t.like(narrowed, { status: 502, code: 'upstream_error', param: 'input' });
});

test('`paramOfCode` names this service’s field by the refusal’s code (a text body too); other codes keep their own param, and a 5xx none', (t) => {
  const options = { what: 'The chat completion', paramOfCode: { model_not_found: 'model' } };
  t.like(thrown(() => relayError({ status: 404, body: '{"error":{"message":"no model","code":"model_not_found","param":null}}' }, options)), { status: 404, code: 'model_not_found', param: 'model' });
  t.like(thrown(() => relayError({ status: 400, body: { error: { message: 'bad', code: 'invalid_value', param: 'messages' } } }, options)), { status: 400, param: 'messages' });
  t.like(thrown(() => relayError({ status: 503, body: { error: { message: 'down', code: 'model_not_found' } } }, options)), { status: 502, param: null });
});

test('an address given as a function is asked at every call, so a restarted service on a new port is followed', async (t) => {
  const servers = await Promise.all(
    ['first', 'second'].map(async (name) => {
      const { origin } = await servedOnLoopback(t, (_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ name })));
      return origin;
    }),
  );
  let current = servers[0]!;
  const client = createInternalClient({ baseUrl: () => current, timeoutMs: 2000 });
  t.teardown(() => client.close());
  t.deepEqual((await client.call('GET', '/')).body, { name: 'first' });
  current = servers[1]!;
  t.deepEqual((await client.call('GET', '/')).body, { name: 'second' });
});

test('media references are resolved through media-api as the caller; a refusal names the caller’s field', async (t) => {
  const seen: Array<{ url: string; user: string | undefined; body: unknown }> = [];
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    seen.push({ url: req.url!, user: req.headers['x-user-id'] as string | undefined, body });
    const missing = JSON.stringify(body).includes('jan_missing');
    res.writeHead(missing ? 404 : 200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(missing ? { error: { message: "No media found with id 'jan_missing'", param: 'payload' } } : { payload: ['https://files/1'] }));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(() => server.close());
  const client = createInternalClient({ baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, timeoutMs: 2000 });
  t.teardown(() => client.close());

  t.deepEqual(await resolveMediaReferences(client, principal, ['jan_found'], { param: 'messages' }), ['https://files/1']);
  t.deepEqual(seen[0], { url: '/v1/media/resolve', user: 'user_abc', body: { payload: ['jan_found'] } });
  const error = await t.throwsAsync(resolveMediaReferences(client, principal, ['jan_missing'], { param: 'input' }), { instanceOf: ApiError });
  t.like(error, { status: 404, message: "No media found with id 'jan_missing'", param: 'input' });
});
