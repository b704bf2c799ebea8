import test from 'ava';
import OpenAI, { APIError } from 'openai';
import { randomBase62 } from '../../services/kit/index.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';

// Through the edge: a path the route table knows under other methods answers 405 with `Allow`, a
// planned endpoint answers 501, both in the standard error body; an unknown path stays 404.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
let p: TestPlatform;

test.before(async () => {
  p = await startTestPlatform({ env: { BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY, LLM_HEALTH_PROBE_INTERVAL_MS: '0' } });
});
test.after.always(async () => {
  await p?.stop();
});

const call = (method: string, path: string, init: { body?: string; headers?: Record<string, string> } = {}) =>
  fetch(`${p.url}${path}`, { method, body: init.body, headers: { 'X-API-Key': ADMIN_KEY, ...init.headers } });

async function errorOf(res: Response) {
  const body = (await res.json()) as { error: { type: string; code: string; message: string; param: string | null; request_id?: string } };
  return body.error;
}

test('a known path on the wrong method answers 405 with Allow, on every service and under /llm', async (t) => {
  const cases: Array<[string, string, string]> = [
    ['GET', '/v1/chat/completions', 'POST'],
    ['DELETE', '/llm/v1/models', 'GET, HEAD'],
    ['PUT', '/v1/admin/providers/prov_x', 'DELETE, GET, HEAD, PATCH'],
    ['POST', '/v1/models/some/model', 'GET, HEAD'],
    ['PUT', '/v1/responses', 'POST'],
    ['GET', '/v1/responses/resp_x/cancel', 'POST'],
    // Every template that matches the path counts: /v1/media/presigned-url and /v1/media/:id.
    ['PATCH', '/v1/media/presigned-url', 'DELETE, GET, HEAD, POST'],
  ];
  for (const [method, path, allow] of cases) {
    const res = await call(method, path);
    t.is(res.status, 405, `${method} ${path}`);
    t.is(res.headers.get('allow'), allow, `${method} ${path}`);
    const error = await errorOf(res);
    t.like(error, { type: 'invalid_request_error', code: 'method_not_allowed' }, `${method} ${path}`);
    t.true(error.message.includes(allow), error.message);
    t.is(typeof error.request_id, 'string');
  }
});

test('the wrong method with a non-JSON body is a 405, not a 415: the body is never read', async (t) => {
  const res = await call('PUT', '/v1/projects', { body: 'not json', headers: { 'content-type': 'text/plain' } });
  t.is(res.status, 405);
  t.is(res.headers.get('allow'), 'GET, HEAD, POST');
});

test('a planned endpoint answers 501 not_implemented (official SDK), and still needs a credential', async (t) => {
  const client = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: 'unused', maxRetries: 0, defaultHeaders: { 'X-API-Key': ADMIN_KEY, Authorization: null } });
  const error = await t.throwsAsync(client.embeddings.create({ model: 'any', input: 'hello' }), { instanceOf: APIError });
  t.is((error as APIError).status, 501);
  t.is((error as APIError).code, 'not_implemented');
  t.regex((error as APIError).message, /POST \/v1\/embeddings is planned but not built yet/);

  const images = await call('POST', '/llm/v1/images/generations', { body: '{}', headers: { 'content-type': 'application/json' } });
  t.is(images.status, 501);
  t.like(await errorOf(images), { code: 'not_implemented' });
  // The wrong method on a planned path is a 405 as well.
  const get = await call('GET', '/v1/embeddings');
  t.is(get.status, 405);
  t.is(get.headers.get('allow'), 'POST');

  const anonymous = await fetch(`${p.url}/v1/embeddings`, { method: 'POST', body: '{}', headers: { 'content-type': 'application/json' } });
  t.is(anonymous.status, 401);
});

test('a path no route knows stays a 404', async (t) => {
  const res = await call('GET', '/v1/nothing-here');
  t.is(res.status, 404);
  t.like(await errorOf(res), { code: 'not_found' });
  t.is(res.headers.get('allow'), null);
});
