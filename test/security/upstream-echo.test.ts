import test from 'ava';
import OpenAI, { APIError } from 'openai';
import { randomBase62 } from '../../services/kit/index.js';
import { startHostileUpstream, type HostileUpstream } from '../fakes/hostile-upstream.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';

// Upstream echo against the chat path, through the edge with the official SDK: a provider that
// echoes its request, its Authorization header (our provider key) and its own address, in JSON and
// plain-text error bodies and inside a stream. Nothing of it may reach the caller.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
const PROVIDER_KEY = `sk-live-${randomBase62(40)}`;
let p: TestPlatform;
let hostile: HostileUpstream;
let client: OpenAI;

test.before(async () => {
  hostile = await startHostileUpstream({ models: ['echo-model'] });
  p = await startTestPlatform({ env: { BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY, LLM_HEALTH_PROBE_INTERVAL_MS: '0', LLM_HEALTH_FAILURE_THRESHOLD: '1000' } });
  const admin = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: 'unused', maxRetries: 0, defaultHeaders: { 'X-API-Key': ADMIN_KEY, Authorization: null } });
  await admin.post('/admin/providers', { body: { name: 'Echo', vendor: 'fake', base_url: hostile.url, api_key: PROVIDER_KEY } });
  const login = await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' });
  client = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: ((await login.json()) as { access_token: string }).access_token, maxRetries: 0 });
});
test.after.always(async () => {
  await p?.stop();
  await hostile?.close();
});

const secretsIn = (text: string) =>
  [PROVIDER_KEY, PROVIDER_KEY.slice(8), hostile.host, 'internal-node', 'got_headers'].filter((s) => text.toLowerCase().includes(s.toLowerCase()));

/** Everything the caller can see of a failed call: status, headers, body or stream text. */
async function seen(content: string, stream: boolean): Promise<{ status: number | undefined; text: string }> {
  try {
    const created = client.chat.completions.create({ model: 'echo-model', messages: [{ role: 'user', content }], stream } as never);
    const response = await (created as unknown as { asResponse(): Promise<Response> }).asResponse();
    return { status: response.status, text: `${JSON.stringify([...response.headers])}${await response.text()}` };
  } catch (error) {
    const e = error as APIError;
    return { status: e.status, text: `${e.message}${JSON.stringify(e.error)}${JSON.stringify(e.headers)}` };
  }
}

for (const status of [400, 401, 403, 404, 409, 413, 422, 429, 500, 502, 503]) {
  for (const form of ['echo', 'echotext']) {
    test(`upstream ${status} echoing in ${form === 'echo' ? 'JSON' : 'plain text'}: the caller sees none of it`, async (t) => {
      for (const stream of [false, true]) {
        const { status: got, text } = await seen(`hi #${form}:${status}`, stream);
        t.true(got !== undefined && got >= 400, `status ${got}`);
        t.deepEqual(secretsIn(text), [], text);
        t.regex(text, new RegExp(`upstream status ${status}|rate limited`));
      }
    });
  }
}

test('an error event inside a stream that quotes the key: replaced by our event', async (t) => {
  const { status, text } = await seen('hi #echostream', true);
  t.is(status, 200);
  t.deepEqual(secretsIn(text), [], text);
  t.true(text.includes('"type":"internal_error"'));
  const stream = await client.chat.completions.create({ model: 'echo-model', messages: [{ role: 'user', content: '#echostream' }], stream: true });
  const error = await t.throwsAsync(async () => {
    for await (const _ of stream) void _;
  });
  t.deepEqual(secretsIn(String((error as Error).message)), []);
});

test('the known context-length error maps through as a 400 with its code, without the quoted key', async (t) => {
  const error = await t.throwsAsync(client.chat.completions.create({ model: 'echo-model', messages: [{ role: 'user', content: '#context' }] }));
  t.is((error as APIError).status, 400);
  t.is((error as APIError).code, 'context_length_exceeded');
  t.deepEqual(secretsIn(JSON.stringify((error as APIError).error)), []);
});
