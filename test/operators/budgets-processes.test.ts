import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import OpenAI, { type APIError } from 'openai';
import { GATEWAY_TOKEN_HEADER, IDENTITY_HEADERS, randomBase62 } from '../../services/kit/index.js';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.js';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.js';
import { cleanEnv, entryArgs, freePort, startChild, type Child } from '../helpers/process.js';
import { waitFor } from '../helpers/wait.js';

// One budget, two llm-api OS processes (`node services/llm-api/main.ts`, as deployed) sharing the
// PostgreSQL schema of a test platform: concurrent requests with one key go through both, and the
// spend may pass the budget by at most one request. The platform registers the provider and the
// key; the two processes are called the way the edge calls a service (gateway token + identity).
const ADMIN_KEY = `sk_${randomBase62(32)}`;
const PER_REQUEST = 1000; // µUSD per request
const PROCESSES = 2;
let p: TestPlatform;
let fake: FakeUpstream;
let dataDir: string;
const children: Child[] = [];

async function startLlmApiProcess(): Promise<string> {
  const config = p.runtime.config;
  const port = await freePort();
  const env: Record<string, string> = {
    NODE_ENV: 'test',
    LOG_LEVEL: 'warn',
    DATA_DIR: dataDir,
    DATABASE_URL: config.DATABASE_URL!,
    DATABASE_SCHEMA: config.DATABASE_SCHEMA!,
    DATABASE_POOL_MAX: '4',
    GATEWAY_SHARED_SECRET: p.gatewaySecret,
    LLM_API_PORT: String(port),
    PROVIDER_URL_ALLOW: '127.0.0.1',
    LLM_HEALTH_PROBE_INTERVAL_MS: '0',
    LLM_PROVIDER_SYNC_INTERVAL_MS: '0',
  };
  if (config.AMQP_URL) Object.assign(env, { AMQP_URL: config.AMQP_URL, BUS_EXCHANGE: config.BUS_EXCHANGE, BUS_QUEUE_PREFIX: config.BUS_QUEUE_PREFIX });
  if (config.MASTER_KEY) env.MASTER_KEY = config.MASTER_KEY;
  const child = startChild(process.execPath, entryArgs('services/llm-api/main.ts'), { env: cleanEnv(env) });
  children.push(child);
  const url = `http://127.0.0.1:${port}`;
  const early = child.exited.then((r) => {
    throw new Error(`llm-api exited early (${r.code}): ${child.stderr().slice(-2000)}`);
  });
  early.catch(() => {});
  await Promise.race([early, waitFor(async () => (await fetch(`${url}/readyz`).catch(() => undefined))?.status === 200, 60_000, `llm-api on ${port} ready`, 100)]);
  return url;
}

test.before(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'budget-procs-'));
  fake = await startFakeUpstream({ name: 'procs', models: [{ id: 'procs-model' }] });
  p = await startTestPlatform({ env: { BOOTSTRAP_ADMIN_API_KEY: ADMIN_KEY, LLM_HEALTH_PROBE_INTERVAL_MS: '0', LLM_PROVIDER_SYNC_INTERVAL_MS: '0' } });
});
test.after.always(async () => {
  for (const child of children) child.process.kill('SIGTERM');
  await Promise.all(children.map((c) => c.exited));
  await p?.stop();
  await fake?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

test('one budget holds across two llm-api OS processes: overshoot of at most one request (printed)', async (t) => {
  t.timeout(180_000);
  const admin = new OpenAI({ baseURL: `${p.url}/v1`, apiKey: 'unused', maxRetries: 0, defaultHeaders: { 'X-API-Key': ADMIN_KEY, Authorization: null } });
  await admin.post('/admin/providers', { body: { name: 'Procs', vendor: 'fake', base_url: fake.url } });
  const pms: any = await admin.get('/admin/models/provider-models', { query: { limit: 100 } });
  for (const pm of pms.data) {
    await admin.patch(`/admin/models/provider-models/${pm.id}`, { body: { pricing: { lines: [{ unit: 'per_request', amount_micro_usd: PER_REQUEST }] } } });
  }
  const adminUserId = (await p.runtime.db.knex('users').where({ is_admin: true }).first()).id;
  const budget = 10 * PER_REQUEST + 500;
  const key: any = await admin.post('/admin/api-keys', { body: { user_id: adminUserId, name: 'procs', tier: 'enterprise', max_budget_micro_usd: budget } });

  // Started after the pricing change, so both load the priced catalog.
  const urls = await Promise.all(Array.from({ length: PROCESSES }, () => startLlmApiProcess()));
  const identity = {
    [GATEWAY_TOKEN_HEADER]: p.gatewaySecret,
    [IDENTITY_HEADERS.authMethod]: 'apikey',
    [IDENTITY_HEADERS.userId]: adminUserId,
    [IDENTITY_HEADERS.subject]: adminUserId,
    [IDENTITY_HEADERS.apiKeyId]: key.id,
  };
  const clients = urls.map((url) => new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, defaultHeaders: { Authorization: null, ...identity } }));
  // A short upstream delay keeps the requests of a wave in flight together on both processes.
  const ask = (client: OpenAI) => client.chat.completions.create({ model: 'procs-model', messages: [{ role: 'user', content: 'hello #delay:30' }] });

  let ok = 0;
  let refused = 0;
  let busy = 0;
  const okPerProcess = urls.map(() => 0);
  for (let wave = 0; wave < 15; wave++) {
    const results = await Promise.allSettled(Array.from({ length: 8 }, (_, i) => ask(clients[i % PROCESSES]!).then(() => i % PROCESSES)));
    for (const r of results) {
      if (r.status === 'fulfilled') {
        ok++;
        okPerProcess[r.value]!++;
      } else if ((r.reason as APIError).code === 'insufficient_quota') refused++;
      else if ((r.reason as APIError).code === 'budget_busy') busy++;
      else throw r.reason;
    }
    const alone = await ask(clients[wave % PROCESSES]!).then(
      () => 'ok',
      (error: APIError) => error.code ?? String(error),
    );
    if (alone === 'ok') {
      ok++;
      okPerProcess[wave % PROCESSES]!++;
    } else if (alone === 'insufficient_quota') {
      refused++;
      break;
    } else if (alone !== 'budget_busy') throw new Error(`unexpected ${alone}`);
  }
  const counter = await waitFor(async () => {
    const row = await p.runtime.db.knex('llm_spend_counters').where({ scope: 'key', scope_id: key.id }).first();
    return row && row.in_flight === 0 ? row : undefined;
  }, 10_000, 'every admitted request settled');
  const spent = Number(counter.spent_micro_usd);
  const overshoot = spent - budget;
  t.log(`${PROCESSES} processes; admitted per process: ${okPerProcess.join(', ')}; ${refused} refused as used up, ${busy} asked to retry`);
  t.log(`budget ${budget} µUSD, spent ${spent} µUSD; overshoot ${overshoot} µUSD (one request = ${PER_REQUEST} µUSD)`);
  t.true(okPerProcess.every((n) => n > 0), 'both processes served requests');
  t.is(spent, ok * PER_REQUEST, 'every admitted request was counted once');
  t.true(spent >= budget, 'the budget was used up');
  t.true(refused > 0, 'requests were refused once it was');
  t.true(overshoot < PER_REQUEST, 'overshoot below one request (so within one request per process)');
});
