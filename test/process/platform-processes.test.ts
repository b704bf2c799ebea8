import { randomInt } from 'node:crypto';
import test, { type ExecutionContext } from 'ava';
import knexFactory from 'knex';
import OpenAI from 'openai';
import { Redis } from 'ioredis';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.js';
import { deleteAmqpTopology } from '../helpers/amqp.js';
import { dropSchema, uniqueName, TEST_AMQP_URL, TEST_DATABASE_URL, TEST_REDIS_URL } from '../helpers/env.js';
import { cleanEnv, entryArgs, freePort, jsonLogLines, processAlive, startChild, waitWhileRunning, type Child } from '../helpers/process.js';
import { createTestUser } from '../helpers/users.js';
import { waitFor } from '../helpers/wait.js';

// `PLATFORM_PROCESSES`: several copies of the whole platform behind one set of ports, started,
// replaced and stopped by one supervising process. Real PostgreSQL, RabbitMQ and Redis; the fake
// provider is the only stand-in. Each request below opens its own connection, so Node's cluster
// hands consecutive requests to different copies, and the access lines (each with its copy's pid)
// say which copy served which request.

const BASE62 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
const MODEL = 'fake-model';
const mainTs = entryArgs('services/platform/main.ts');

interface Started {
  child: Child;
  url: string;
  /** The edge's metrics listener, shared by the copies as the public port is. */
  metricsUrl: string;
  adminKey: string;
  prefix: string;
  /** The copies' pids, from the supervisor's summary line. */
  pids: number[];
}

/** JSON log lines printed so far (the copies share the supervisor's stdout). */
const logLines = (child: Child) => jsonLogLines(child);

async function startSupervised(t: ExecutionContext, fake: FakeUpstream, env: Record<string, string> = {}): Promise<Started> {
  const prefix = uniqueName('procs');
  const adminKey = `sk_${Array.from({ length: 32 }, () => BASE62[randomInt(62)]).join('')}`;
  const port = await freePort();
  const metricsPort = await freePort();
  const ports = { LLM_API_PORT: await freePort(), RESPONSE_API_PORT: await freePort(), MEDIA_API_PORT: await freePort(), MCP_TOOLS_PORT: await freePort() };
  const child = startChild(process.execPath, mainTs, {
    env: cleanEnv({
      NODE_ENV: 'test',
      LOG_LEVEL: 'info',
      PLATFORM_PROCESSES: '2',
      DATABASE_URL: TEST_DATABASE_URL,
      DATABASE_SCHEMA: prefix,
      DATABASE_POOL_MAX: '4',
      AMQP_URL: TEST_AMQP_URL,
      BUS_EXCHANGE: `${prefix}.events`,
      BUS_QUEUE_PREFIX: `${prefix}.`,
      REDIS_URL: TEST_REDIS_URL,
      EDGE_REDIS_PREFIX: prefix,
      BOOTSTRAP_ADMIN_API_KEY: adminKey,
      PROVIDER_URL_ALLOW: '127.0.0.1',
      LLM_CATALOG_POLL_MS: '200',
      GATEWAY_PORT: String(port),
      EDGE_METRICS_PORT: String(metricsPort),
      ...Object.fromEntries(Object.entries(ports).map(([k, v]) => [k, String(v)])),
      ...env,
    }),
  });
  t.teardown(async () => {
    if (child.process.exitCode === null && child.process.signalCode === null) {
      child.process.kill('SIGKILL');
      await child.exited;
    }
    for (const line of logLines(child)) if (typeof line.pid === 'number') killQuietly(line.pid);
    await dropSchema(prefix);
    await deleteAmqpTopology(`${prefix}.`, `${prefix}.events`);
    const redis = new Redis(TEST_REDIS_URL);
    const keys = await redis.keys(`${prefix}*`);
    if (keys.length) await redis.del(...keys);
    redis.disconnect();
  });
  const summary = await waitWhileRunning(child, 'the supervisor', () => /processes: 2 \(pids (\d+), (\d+)\)/.exec(child.stdout()), 120_000, 'both copies serving', 100);
  t.true(child.stdout().includes(`platform ready: http://127.0.0.1:${port}`), child.stdout().slice(-2000));
  const url = `http://127.0.0.1:${port}`;
  // The provider, through one copy; each copy's catalog notices it on its own.
  const admin = keyClient(url, adminKey);
  await admin.post('/admin/providers', { body: { name: 'Alpha', vendor: 'fake', base_url: fake.url } });
  return { child, url, metricsUrl: `http://127.0.0.1:${metricsPort}`, adminKey, prefix, pids: [Number(summary[1]), Number(summary[2])] };
}

function killQuietly(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

const keyClient = (url: string, key: string, headers: Record<string, string> = {}) =>
  new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, defaultHeaders: { 'X-API-Key': key, Authorization: null, ...headers } });

/** One chat on a connection of its own (`Connection: close`); resolves with the request id the edge gave it. */
async function chatOnNewConnection(url: string, key: string): Promise<{ requestId: string; text: string }> {
  const client = keyClient(url, key, { Connection: 'close' });
  const { data, response } = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hello' }] }).withResponse();
  return { requestId: response.headers.get('x-request-id') ?? '', text: data.choices[0]?.message.content ?? '' };
}

/** The pid of the copy whose edge (`edge request`) or service (`request`) logged this request id. */
function servedBy(child: Child, requestId: string, msg: 'edge request' | 'request'): number | undefined {
  const line = logLines(child).find((l) => l.request_id === requestId && l.msg === msg && (msg === 'edge request' || l.service === 'llm-api'));
  return line?.pid as number | undefined;
}

/** Chats until the model is listed by both copies' catalogs (each polls on its own). */
async function untilServedByBoth(s: Started): Promise<void> {
  const seen = new Set<number>();
  await waitFor(
    async () => {
      const answer = await chatOnNewConnection(s.url, s.adminKey).catch(() => undefined);
      if (answer) {
        const pid = await waitFor(() => servedBy(s.child, answer.requestId, 'edge request'), 10_000, 'the edge line');
        seen.add(pid);
      }
      return seen.size === 2;
    },
    60_000,
    'both copies answering chats',
    50,
  );
}

let fake: FakeUpstream;
test.before(async () => {
  fake = await startFakeUpstream({ name: 'procs', models: [{ id: MODEL }] });
});
test.after.always(async () => {
  await fake?.close();
});

test('several processes need PostgreSQL and Redis: one line each, no stack; a bad count names the setting', async (t) => {
  const embedded = startChild(process.execPath, mainTs, { env: cleanEnv({ NODE_ENV: 'test', PLATFORM_PROCESSES: '2' }) });
  const { code } = await embedded.exited;
  t.is(code, 1);
  const lines = embedded.stderr().trim().split('\n');
  t.is(lines.length, 2, embedded.stderr());
  t.regex(lines[0]!, /^refusing to start: PLATFORM_PROCESSES=2 with the embedded PGlite database.*DATABASE_URL/);
  t.regex(lines[1]!, /^refusing to start: PLATFORM_PROCESSES=2 without REDIS_URL/);

  const bad = startChild(process.execPath, mainTs, { env: cleanEnv({ NODE_ENV: 'test', PLATFORM_PROCESSES: 'many' }) });
  t.is((await bad.exited).code, 1);
  t.regex(bad.stderr(), /PLATFORM_PROCESSES/);
  t.notRegex(bad.stderr(), /\n\s+at /, 'no stack trace');
});

test('two copies share the ports, the keys and the limits store; a killed copy is replaced; SIGTERM stops both', async (t) => {
  t.timeout(240_000);
  const s = await startSupervised(t, fake);
  t.is(new Set(s.pids).size, 2);
  await untilServedByBoth(s);

  // A key minted through the API (one copy) is accepted by both, with the openai SDK.
  const db = knexFactory({ client: 'pg', connection: TEST_DATABASE_URL, searchPath: [s.prefix], pool: { min: 0, max: 1 } });
  t.teardown(() => db.destroy());
  const user = await createTestUser(db);
  const minted: any = await keyClient(s.url, s.adminKey).post('/admin/api-keys', { body: { user_id: user.id, name: 'procs', tier: 'enterprise' } });
  const served = new Set<number>();
  for (let i = 0; i < 8; i++) {
    const answer = await chatOnNewConnection(s.url, minted.key as string);
    t.true(answer.text.length > 0);
    served.add((await waitFor(() => servedBy(s.child, answer.requestId, 'edge request'), 10_000, 'the edge line'))!);
  }
  t.deepEqual([...served].sort(), [...s.pids].sort(), 'fresh connections reach both copies');

  // A scrape reaches one copy, which answers for both: every series labelled with its copy's pid,
  // each family once. Twice, so both copies have answered one.
  for (let i = 0; i < 2; i++) {
    const page = await (await fetch(`${s.metricsUrl}/metrics`, { headers: { connection: 'close' } })).text();
    for (const pid of s.pids) t.regex(page, new RegExp(`^edge_requests_total\\{[^}]*pid="${pid}"[^}]*\\} [1-9]`, 'm'), `copy ${pid}'s requests on the page`);
    t.is(page.match(/^# TYPE edge_requests_total /gm)?.length, 1, 'one family, both copies in it');
  }

  // A copy killed from outside is replaced; the platform keeps answering on the same port.
  const [killed, survivor] = s.pids as [number, number];
  process.kill(killed, 'SIGKILL');
  const restarted = await waitFor(() => logLines(s.child).find((l) => l.msg === 'platform process restarted' && l.replaces === killed), 60_000, 'the replacement serving', 50);
  const replacement = restarted.pid as number;
  t.not(replacement, killed);
  t.true(processAlive(replacement));
  const after = new Set<number>();
  for (let i = 0; i < 8; i++) {
    const answer = await chatOnNewConnection(s.url, minted.key as string);
    after.add((await waitFor(() => servedBy(s.child, answer.requestId, 'edge request'), 10_000, 'the edge line'))!);
  }
  t.deepEqual([...after].sort(), [survivor, replacement].sort(), 'the survivor and the replacement serve');

  s.child.process.kill('SIGTERM');
  const { code } = await s.child.exited;
  t.is(code, 0, s.child.stderr().slice(-2000));
  t.false(processAlive(survivor), 'the survivor stopped');
  t.false(processAlive(replacement), 'the replacement stopped');
  t.notRegex(s.child.stderr(), /\n\s+at /, 'no stack trace');
});

test('over the HTTP hop a copy’s edge reaches the other copy’s service: the copies share one gateway secret', async (t) => {
  t.timeout(240_000);
  const s = await startSupervised(t, fake, { EDGE_IN_PROCESS_DISPATCH: 'false' });
  await untilServedByBoth(s);
  // Concurrent requests make each edge open several connections to llm-api's port, which the
  // cluster deals out to both copies: some cross. A copy with a secret of its own would answer those 401.
  const answers = await Promise.all(Array.from({ length: 16 }, () => chatOnNewConnection(s.url, s.adminKey)));
  let crossed = 0;
  for (const answer of answers) {
    t.true(answer.text.length > 0);
    const edge = await waitFor(() => servedBy(s.child, answer.requestId, 'edge request'), 10_000, 'the edge line');
    const service = await waitFor(() => servedBy(s.child, answer.requestId, 'request'), 10_000, 'the service line');
    if (edge !== service) crossed++;
  }
  t.true(crossed > 0, 'at least one request crossed from one copy to the other');
  t.false(s.child.stdout().includes(s.adminKey), 'no key in the logs');
});
