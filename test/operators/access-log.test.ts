import test from 'ava';
import OpenAI from 'openai';
import { createLogger, randomBase62 } from '../../services/kit/index.js';
import { startFakeUpstream } from '../fakes/openai-upstream.js';
import { bootstrapAdmin, startTestPlatform } from '../helpers/platform.js';
import { chatRecordFields } from '../helpers/records.js';
import { waitFor } from '../helpers/wait.js';

// The edge's access log: one line per request with identity, route, status, duration and, for chat,
// model, provider and token counts, read from the log stream of a platform started here. The key's
// secret and the prompt text must never appear, unless LOG_PROMPTS=true brings the prompt in.
type Line = Record<string, any>;

function captureLogger() {
  const lines: Line[] = [];
  const raw: string[] = [];
  const logger = createLogger({ level: 'info', name: 'platform' }, {
    write(line: string) {
      raw.push(line);
      lines.push(JSON.parse(line) as Line);
    },
  });
  return { logger, lines, text: () => raw.join('') };
}

async function setUp(env: Record<string, string> = {}) {
  const adminKey = `sk_${randomBase62(32)}`;
  const fake = await startFakeUpstream({ name: 'alpha', models: [{ id: 'model-a' }] });
  const logs = captureLogger();
  const p = await startTestPlatform({ env: { BOOTSTRAP_ADMIN_API_KEY: adminKey, LLM_HEALTH_PROBE_INTERVAL_MS: '0', ...env }, logger: logs.logger });
  const admin = await bootstrapAdmin(p, adminKey, fake.url);
  return { p, fake, logs, adminKey, ...admin };
}

const edgeLine = (lines: Line[], requestId: string) => lines.find((l) => l.msg === 'edge request' && l.request_id === requestId);

test('one edge line per chat request carries identity, route, model, provider and tokens, and no secret or prompt', async (t) => {
  const s = await setUp();
  try {
    const prompt = `secret-plan-${randomBase62(10)}`;
    const { data, response } = await s.client.chat.completions.create({ model: 'model-a', messages: [{ role: 'user', content: `${prompt} one two` }] }).withResponse();
    const requestId = response.headers.get('x-request-id')!;
    t.is(response.headers.get('x-usage-report'), null, 'the usage report stays between the service and the edge');
    t.is(response.headers.get('trailer'), null);
    const line = await waitFor(() => edgeLine(s.logs.lines, requestId), 5000, 'edge access line');
    t.like(line, {
      service: 'gateway',
      level: 30,
      route: 'llm-api-v1',
      provider: s.providerId,
      ...chatRecordFields({ userId: s.adminId, keyId: s.keyId }, 'model-a', data.usage!),
    });
    t.true(typeof line.duration_ms === 'number' && line.duration_ms >= 0);
    t.is(s.logs.lines.filter((l) => l.msg === 'edge request' && l.request_id === requestId).length, 1, 'exactly one access line');

    // A stream reports its tokens at the end (a trailer the edge keeps to itself).
    const streamed = await s.client.chat.completions
      .create({ model: 'model-a', stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: `${prompt} three` }] })
      .withResponse();
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of streamed.data) usage = chunk.usage ?? usage;
    t.is(streamed.response.headers.get('trailer'), null);
    const streamId = streamed.response.headers.get('x-request-id')!;
    await waitFor(() => edgeLine(s.logs.lines, streamId), 5000, 'stream line');
    const streamLine = edgeLine(s.logs.lines, streamId)!;
    t.like(streamLine, { status: 200, model: 'model-a', provider: s.providerId, prompt_tokens: usage!.prompt_tokens, completion_tokens: usage!.completion_tokens, key_id: s.keyId });

    // A request without a credential: identity fields are null, nothing chat-specific.
    const anonymous = await fetch(`${s.p.url}/v1/models`);
    const anonymousLine = await waitFor(() => edgeLine(s.logs.lines, anonymous.headers.get('x-request-id')!), 5000, 'anonymous line');
    t.like(anonymousLine, { status: anonymous.status, user_id: null, key_id: null, auth_method: null });
    t.false('model' in anonymousLine);

    const everything = s.logs.text();
    t.false(everything.includes(s.adminKey), 'the API key secret never reaches a log');
    t.false(everything.includes(prompt), 'the prompt text never reaches a log by default');
  } finally {
    await s.p.stop();
    await s.fake.close();
  }
});

test('a host that does not ask for the usage report (Kong) never gets one: JSON or stream, even if the client asks', async (t) => {
  const s = await setUp();
  try {
    // What Kong sends llm-api: the gateway token and the verified identity, no X-Gateway-Usage-Report.
    const asKong = {
      'content-type': 'application/json',
      'x-gateway-token': s.p.gatewaySecret,
      'x-auth-method': 'apikey',
      'x-user-id': s.adminId,
      'x-user-subject': s.adminId,
      'x-user-key-id': s.keyId,
    };
    const direct = `${s.p.serviceUrl('llm-api')}/v1/chat/completions`;
    const json = await fetch(direct, { method: 'POST', headers: asKong, body: JSON.stringify({ model: 'model-a', messages: [{ role: 'user', content: 'hi' }] }) });
    t.is(json.status, 200, await json.clone().text());
    t.is(json.headers.get('x-usage-report'), null);
    const stream = await fetch(direct, { method: 'POST', headers: asKong, body: JSON.stringify({ model: 'model-a', stream: true, messages: [{ role: 'user', content: 'hi' }] }) });
    t.is(stream.status, 200);
    t.is(stream.headers.get('trailer'), null);
    t.true((await stream.text()).includes('[DONE]'));

    // A client cannot ask for it either: the edge strips a client-sent X-Gateway-* header, sets its own and takes the report off.
    const viaEdge = await fetch(`${s.p.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': s.adminKey, 'x-gateway-usage-report': '1' },
      body: JSON.stringify({ model: 'model-a', messages: [{ role: 'user', content: 'hi' }] }),
    });
    t.is(viaEdge.status, 200);
    t.is(viaEdge.headers.get('x-usage-report'), null);
  } finally {
    await s.p.stop();
    await s.fake.close();
  }
});

test('with LOG_PROMPTS=true the prompt is logged with the request id, and the key secret still is not', async (t) => {
  const s = await setUp({ LOG_PROMPTS: 'true' });
  try {
    const prompt = `visible-prompt-${randomBase62(10)}`;
    const { response } = await s.client.chat.completions.create({ model: 'model-a', messages: [{ role: 'user', content: prompt }] }).withResponse();
    const requestId = response.headers.get('x-request-id')!;
    await waitFor(() => edgeLine(s.logs.lines, requestId), 5000, 'edge access line');
    const promptLine = s.logs.lines.find((l) => l.msg === 'chat prompt' && l.request_id === requestId);
    t.truthy(promptLine);
    t.is(promptLine!.messages[0].content, prompt);
    t.false(s.logs.text().includes(s.adminKey));
  } finally {
    await s.p.stop();
    await s.fake.close();
  }
});
