import test from 'ava';
import { randomBase62 } from '../../services/kit/index.js';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.js';
import { startFaultProxyFor, type UrlFaultProxy } from '../helpers/fault-proxy.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';
import { reliabilityFigures } from '../helpers/reliability-figures.js';
import { TEST_DATABASE_URL } from '../helpers/servers.js';
import { waitFor } from '../helpers/wait.js';

// PostgreSQL's connections are cut while chat completions (stored in conversations, metered in
// usage) flow through the edge; new connections are refused until the proxy is restored. Every
// request gets an answer (no hang): a 2xx, or a 503 `service_unavailable` in the error body. The
// platform recovers by itself, and every answer that was a 2xx is readable afterwards: its
// conversation holds the user message and the answer, and its usage row exists.
const ADMIN_KEY = `sk_${randomBase62(32)}`;
const WORKERS = 4;
const figures = reliabilityFigures('postgres-cut');
const row = figures.row('PostgreSQL connections cut mid-load');

let proxy: UrlFaultProxy;
let fake: FakeUpstream;
let p: TestPlatform;
let token: string;

test.before(async () => {
  proxy = await startFaultProxyFor(TEST_DATABASE_URL, 5432);
  fake = await startFakeUpstream({ name: 'pgcut', models: [{ id: 'pgcut-model' }] });
  p = await startTestPlatform({
    env: { DATABASE_URL: proxy.proxiedUrl, BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY, LLM_HEALTH_PROBE_INTERVAL_MS: '0', LLM_USAGE_FLUSH_MS: '50' },
  });
  const added = await fetch(`${p.url}/v1/admin/providers`, {
    method: 'POST',
    headers: { 'x-api-key': ADMIN_KEY, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'PgCut', vendor: 'fake', base_url: fake.url }),
  });
  if (added.status !== 201) throw new Error(`provider not added: ${added.status} ${await added.text()}`);
  token = ((await (await fetch(`${p.url}/llm/auth/guest-login`, { method: 'POST' })).json()) as { access_token: string }).access_token;
});
test.after.always(async () => {
  figures.write();
  await p?.stop();
  await fake?.close();
  await proxy?.close();
});

interface Outcome {
  status: number;
  body: any;
  requestId: string | null;
}

async function chat(n: number): Promise<Outcome> {
  const res = await fetch(`${p.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'pgcut-model', store: true, messages: [{ role: 'user', content: `question ${n}` }] }),
  });
  const text = await res.text();
  let body: any;
  try {
    body = JSON.parse(text);
  } catch {
    body = text;
  }
  return { status: res.status, body, requestId: res.headers.get('x-request-id') };
}

test('PostgreSQL cut mid-load: clean 503s during the outage, recovery without help, no accepted chat lost', async (t) => {
  const outcomes: Array<Outcome & { n: number }> = [];
  let sent = 0;
  let stop = false;
  const load = Promise.all(
    Array.from({ length: WORKERS }, async () => {
      while (!stop) {
        const n = sent++;
        // A dropped connection (no answer at all) is recorded as status 0 and fails the test.
        outcomes.push({ n, ...(await chat(n).catch((error: Error) => ({ status: 0, body: String((error.cause as Error | undefined)?.message ?? error.message), requestId: null }))) });
      }
    }),
  );
  const count = (predicate: (o: Outcome) => boolean) => outcomes.filter(predicate).length;

  await waitFor(() => count((o) => o.status === 200) >= 20, 30_000, 'load flowing before the cut');
  proxy.cut();
  row.faultsInjected++;
  const before503 = count((o) => o.status === 503);
  await waitFor(() => count((o) => o.status === 503) >= before503 + 20, 30_000, 'requests refused with 503 during the outage').catch((error) => {
    t.log(outcomes.slice(-10).map((o) => `${o.status} ${JSON.stringify(o.body).slice(0, 300)}`).join('\n'));
    throw error;
  });
  proxy.resume();
  const atResume = outcomes.length;
  await waitFor(() => outcomes.slice(atResume).filter((o) => o.status === 200).length >= 20, 60_000, 'successful chats after the database is back');
  stop = true;
  await load;

  // Every answer is a 200 or a clean 503 in the error body.
  const unexpected = outcomes.filter((o) => o.status !== 200 && o.status !== 503);
  t.deepEqual(unexpected.slice(0, 5).map((o) => `${o.status} ${JSON.stringify(o.body).slice(0, 200)}`), []);
  for (const o of outcomes.filter((x) => x.status === 503)) {
    t.like(o.body, { error: { type: 'internal_error', code: 'service_unavailable' } });
    t.is(typeof o.body.error.request_id, 'string');
  }

  // Every accepted chat is stored (user message and answer) and metered.
  const accepted = outcomes.filter((o) => o.status === 200);
  let lost = 0;
  for (const o of accepted) {
    const conversationId = o.body.conversation?.id;
    const items = conversationId
      ? await fetch(`${p.url}/v1/conversations/${conversationId}/items?order=asc`, { headers: { authorization: `Bearer ${token}` } }).then((r) => r.json() as Promise<any>)
      : { data: [] };
    const texts = (items.data ?? []).map((item: any) => JSON.stringify(item.content));
    if (!texts.some((x: string) => x.includes(`question ${o.n}`)) || !texts.some((x: string) => x.includes('Hello from pgcut'))) lost++;
  }
  const requestIds = accepted.map((o) => o.requestId!);
  const metered = await waitFor(async () => {
    const rows = await p.runtime.db.knex('llm_usage').whereIn('request_id', requestIds).select('request_id');
    return rows.length >= requestIds.length ? rows : undefined;
  }, 30_000, 'usage rows of every accepted chat').catch(() => [] as unknown[]);
  lost += requestIds.length - Math.min(requestIds.length, metered.length);

  row.requestsChecked += outcomes.length;
  row.refused503 += count((o) => o.status === 503);
  row.fiveXx += count((o) => o.status >= 500 && o.status !== 503);
  row.itemsLost += lost;
  t.is(lost, 0);
  t.is(unexpected.length, 0);
  row.faultsSurvived++;
  t.log(`${outcomes.length} requests: ${accepted.length} accepted, ${count((o) => o.status === 503)} refused with 503`);
});
