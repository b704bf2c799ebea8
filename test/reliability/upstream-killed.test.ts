import test from 'ava';
import OpenAI from 'openai';
import { randomBase62 } from '../../services/kit/index.js';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.js';
import { startFaultProxy, type FaultProxy } from '../helpers/fault-proxy.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';
import { reliabilityFigures } from '../helpers/reliability-figures.js';
import { waitFor } from '../helpers/wait.js';

// One provider with two endpoints serving the same model; endpoint A sits behind a fault proxy.
// Mid-load, A is killed (connections cut, new ones refused): every request still succeeds on B
// (failover, streams included), A is marked unhealthy (the admin view says so), and once A answers
// again the active probe restores it (the cool-down is far longer than the test, so only the
// probe can), after which A takes traffic again.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
const WORKERS = 4;
const figures = reliabilityFigures('upstream-killed');
const row = figures.row('upstream provider endpoint killed mid-load');

let a: FakeUpstream;
let b: FakeUpstream;
let proxy: FaultProxy;
let p: TestPlatform;
let providerId: string;
let client: OpenAI;
const endpointA = () => `http://127.0.0.1:${proxy.port}/v1`;

test.before(async () => {
  a = await startFakeUpstream({ name: 'pair', models: [{ id: 'pair-model' }] });
  b = await startFakeUpstream({ name: 'pair', models: [{ id: 'pair-model' }] });
  proxy = await startFaultProxy({ host: '127.0.0.1', port: a.port });
  p = await startTestPlatform({
    env: {
      BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY,
      LLM_HEALTH_FAILURE_THRESHOLD: '2',
      LLM_HEALTH_COOLDOWN_MS: '600000',
      LLM_HEALTH_PROBE_INTERVAL_MS: '100',
      LLM_ROUTING_SEED: '7',
    },
  });
  const created = await fetch(`${p.url}/v1/admin/providers`, {
    method: 'POST',
    headers: { 'x-api-key': ADMIN_KEY, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'Pair', vendor: 'fake', base_url: b.url, endpoints: [{ url: endpointA() }, { url: b.url }] }),
  });
  if (created.status !== 201) throw new Error(`provider not created: ${created.status} ${await created.text()}`);
  providerId = ((await created.json()) as { id: string }).id;
  const token = ((await (await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' })).json()) as { access_token: string }).access_token;
  client = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: token, maxRetries: 0 });
});
test.after.always(async () => {
  figures.write();
  await p?.stop();
  await proxy?.close();
  await a?.close();
  await b?.close();
});

async function healthOfA(): Promise<boolean | undefined> {
  const res = await fetch(`${p.url}/v1/admin/providers/${providerId}`, { headers: { 'x-api-key': ADMIN_KEY } });
  const provider = (await res.json()) as { endpoints?: Array<{ url: string; healthy: boolean }> };
  return provider.endpoints?.find((e) => e.url === endpointA())?.healthy;
}

test('an endpoint killed mid-load: requests fail over, it is marked unhealthy, then restored by the probe', async (t) => {
  const outcomes: Array<{ ok: boolean; error?: string }> = [];
  let stop = false;
  let n = 0;
  const load = Promise.all(
    Array.from({ length: WORKERS }, async () => {
      while (!stop) {
        const stream = n++ % 2 === 0;
        try {
          if (stream) {
            const chunks: string[] = [];
            for await (const c of await client.chat.completions.create({ model: 'pair-model', messages: [{ role: 'user', content: 'hi' }], stream: true })) chunks.push(c.choices[0]?.delta.content ?? '');
            outcomes.push({ ok: chunks.join('') === 'Hello from pair w1 w2 w3 w4' });
          } else {
            const reply = await client.chat.completions.create({ model: 'pair-model', messages: [{ role: 'user', content: 'hi' }] });
            outcomes.push({ ok: reply.choices[0]!.message.content === 'Hello from pair w1 w2 w3 w4' });
          }
        } catch (error) {
          outcomes.push({ ok: false, error: (error as Error).message });
        }
      }
    }),
  );

  await waitFor(() => a.chatCount() >= 5 && b.chatCount() >= 5, 30_000, 'both endpoints take traffic');
  t.true(await healthOfA());
  proxy.cut();
  row.faultsInjected++;
  await waitFor(async () => (await healthOfA()) === false, 30_000, 'endpoint A marked unhealthy');
  const atMark = outcomes.length;
  await waitFor(() => outcomes.length >= atMark + 20, 30_000, 'load served while A is down');
  const servedByA = a.chatCount();

  proxy.resume();
  await waitFor(async () => (await healthOfA()) === true, 30_000, 'endpoint A restored by the probe');
  await waitFor(() => a.chatCount() > servedByA, 30_000, 'A takes traffic again');
  stop = true;
  await load;

  const failed = outcomes.filter((o) => !o.ok);
  row.requestsChecked += outcomes.length;
  row.fiveXx += failed.length;
  t.deepEqual(failed.slice(0, 5), []);
  row.faultsSurvived++;
  t.log(`${outcomes.length} requests, all answered; A served ${a.chatCount()}, B ${b.chatCount()}`);
});
