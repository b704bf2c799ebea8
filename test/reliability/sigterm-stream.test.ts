import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test, { type ExecutionContext } from 'ava';
import knexFactory from 'knex';
import { llmApiService } from '../../services/llm-api/service.js';
import { startFakeUpstream, type FakeUpstream } from '../fakes/openai-upstream.js';
import { ARTICLE_HTML } from '../mcp/helpers.js';
import { solidImage } from '../media/fixtures.js';
import { deleteAmqpTopology } from '../helpers/amqp.js';
import { dropSchema, startTestService, testConfig } from '../helpers/env.js';
import { afterFirstChunk, drainStarted, readyzHalfSent, secondSignalExits } from '../helpers/drain.js';
import { freePort, stackEnv, startEntryPoint, untilListening, type Child } from '../helpers/process.js';
import { reliabilityFigures } from '../helpers/reliability-figures.js';
import { createTestUser, edgeHeaders, type TestUser } from '../helpers/users.js';

// llm-api in its own process (its standalone entry point) gets SIGTERM while a chat stream is in
// flight. From the moment draining starts its /readyz answers 503 (asked on a connection opened
// before the signal, since new connections are refused); the stream runs to its end
// (`data: [DONE]`) within the drain timeout; its usage row is flushed before the process exits 0.
// A second signal during a drain that would take long exits at once. The same for response-api
// (its own process, llm-api beside it): a streamed response loop in flight when the signal comes
// runs to its terminal `response.completed` event and is stored as completed; and for mcp-tools,
// a tool call (scrape of a page the test holds) in flight at the signal returns its result; for
// media-api, an upload from a URL the test holds is stored and answered.
const figures = reliabilityFigures('sigterm-stream');
const row = figures.row('SIGTERM during streaming (llm-api process)');
const responsesRow = figures.row('SIGTERM during a streamed response loop (response-api process)');
test.after.always(() => figures.write());

let fake: FakeUpstream;
test.before(async () => {
  fake = await startFakeUpstream({ name: 'drain', models: [{ id: 'drain-model' }] });
});
test.after.always(() => fake?.close());

interface Service {
  child: Child;
  url: string;
  port: number;
  secret: string;
  admin: TestUser;
  user: TestUser;
  knex: ReturnType<typeof knexFactory>;
  close(): Promise<void>;
}

/**
 * The listening `child` as a Service: an admin, a user, and the fake upstream added as a provider
 * through the llm-api at `llm.url`; `close` kills the child, then runs `cleanup`.
 */
async function asService(child: Child, port: number, knex: ReturnType<typeof knexFactory>, llm: { url: string; secret: string }, cleanup: () => Promise<void>): Promise<Service> {
  const admin = await createTestUser(knex, { admin: true });
  const user = await createTestUser(knex);
  const added = await fetch(`${llm.url}/v1/admin/providers`, {
    method: 'POST',
    headers: { ...edgeHeaders(llm.secret, admin), 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'Drain', vendor: 'fake', base_url: fake.url }),
  });
  if (added.status !== 201) throw new Error(`provider not added: ${added.status} ${await added.text()}`);
  return {
    child,
    url: `http://127.0.0.1:${port}`,
    port,
    secret: llm.secret,
    admin,
    user,
    knex,
    async close() {
      child.process.kill('SIGKILL');
      await child.exited;
      await cleanup();
    },
  };
}

/** What a child on a stack of its own leaves behind: the test's knex on it, its schema and its bus topology. */
async function dropOwnStack(config: ReturnType<typeof testConfig>, knex: ReturnType<typeof knexFactory>): Promise<void> {
  await knex.destroy();
  await dropSchema(config.DATABASE_SCHEMA!);
  await deleteAmqpTopology(config.BUS_QUEUE_PREFIX, config.BUS_EXCHANGE);
}

async function startLlmApi(shutdownTimeoutMs: number): Promise<Service> {
  const config = testConfig();
  const port = await freePort();
  const secret = config.GATEWAY_SHARED_SECRET!;
  const child = startEntryPoint(
    'services/llm-api/main.ts',
    stackEnv(config, {
      GATEWAY_SHARED_SECRET: secret,
      MASTER_KEY: randomBytes(32).toString('hex'),
      LLM_API_PORT: String(port),
      PROVIDER_URL_ALLOW: '127.0.0.1',
      SHUTDOWN_TIMEOUT_MS: String(shutdownTimeoutMs),
      LLM_HEALTH_PROBE_INTERVAL_MS: '0',
    }),
  );
  const url = `http://127.0.0.1:${port}`;
  await untilListening(child, url, 'llm-api');
  const knex = knexFactory({ client: 'pg', connection: config.DATABASE_URL, searchPath: [config.DATABASE_SCHEMA!], pool: { min: 0, max: 2 } });
  return asService(child, port, knex, { url, secret }, () => dropOwnStack(config, knex));
}

/** SIGTERM with a /readyz request half sent before it: once the drain has started, that request answers 503. */
async function sigtermNotReady(t: ExecutionContext, service: { child: Child; port: number }): Promise<void> {
  const probe = await readyzHalfSent(service.port);
  service.child.process.kill('SIGTERM');
  await drainStarted(service.child);
  const readiness = await probe.finish();
  t.is(readiness.status, 503);
  t.is(readiness.body?.checks?.shutdown, 'unavailable');
}

/** Opens a stream and resolves once its first chunk arrived; `rest` is the whole body text. */
async function openStream(s: Service, content: string, path = '/v1/chat/completions'): Promise<{ requestId: string; rest: Promise<string> }> {
  // No platform tools (mcp-tools is not running here): the loop is one model step.
  const body = path === '/v1/responses' ? { model: 'drain-model', stream: true, input: content, tools: [] } : { model: 'drain-model', stream: true, messages: [{ role: 'user', content }] };
  const res = await fetch(`${s.url}${path}`, {
    method: 'POST',
    headers: { ...edgeHeaders(s.secret, s.user), 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (res.status !== 200) throw new Error(`stream refused: ${res.status} ${await res.text()}`);
  const { rest } = await afterFirstChunk(res);
  return { requestId: res.headers.get('x-request-id')!, rest };
}

test('SIGTERM mid-stream: /readyz 503 from the start of the drain, the stream finishes, usage is flushed, exit 0', async (t) => {
  const s = await startLlmApi(30_000);
  t.teardown(() => s.close());
  const ready = await fetch(`${s.url}/readyz`);
  t.is(ready.status, 200);
  const stream = await openStream(s, '#slow:40 #words:40 please');
  await sigtermNotReady(t, s);
  row.faultsInjected++;
  // New connections are refused while draining.
  await t.throwsAsync(fetch(`${s.url}/healthz`));

  const text = await stream.rest;
  t.true(text.endsWith('data: [DONE]\n\n'), text.slice(-200));
  t.regex(text, /"finish_reason":"stop"/);
  const exit = await s.child.exited;
  t.is(exit.code, 0);
  const usage = await s.knex('llm_usage').where({ request_id: stream.requestId }).first();
  t.truthy(usage, 'the stream was metered before the process exited');
  row.requestsChecked += 3;
  row.eventsChecked += 1;
  row.faultsSurvived++;
});

test('a second signal during a long drain exits at once', async (t) => {
  const s = await startLlmApi(600_000);
  t.teardown(() => s.close());
  // The provider holds this stream open: the drain would wait the whole timeout for it.
  const stream = await openStream(s, '#hold');
  row.faultsInjected++;
  await secondSignalExits(t, s.child, stream);
  row.requestsChecked += 1;
  row.faultsSurvived++;
});

/** response-api in its own process, beside an llm-api (in this process) on the same schema and bus. */
async function startResponseApi(shutdownTimeoutMs: number): Promise<Service> {
  const masterKey = randomBytes(32).toString('hex');
  const llm = await startTestService(llmApiService, { env: { MASTER_KEY: masterKey, PROVIDER_URL_ALLOW: '127.0.0.1', LLM_HEALTH_PROBE_INTERVAL_MS: '0' } });
  const config = llm.runtime.config;
  const port = await freePort();
  const child = startEntryPoint(
    'services/response-api/main.ts',
    stackEnv(config, {
      GATEWAY_SHARED_SECRET: llm.gatewaySecret,
      MASTER_KEY: masterKey,
      LLM_API_URL: llm.url,
      RESPONSE_API_PORT: String(port),
      SHUTDOWN_TIMEOUT_MS: String(shutdownTimeoutMs),
    }),
  );
  const url = `http://127.0.0.1:${port}`;
  await untilListening(child, url, 'response-api');
  const knex = llm.runtime.db.knex;
  return asService(child, port, knex, { url: llm.url, secret: llm.gatewaySecret }, () => llm.close());
}

test('response-api: SIGTERM mid-loop, /readyz 503 from the start of the drain, the streamed response completes and is stored, exit 0', async (t) => {
  const s = await startResponseApi(30_000);
  t.teardown(() => s.close());
  const stream = await openStream(s, '#slow:40 #words:40 please', '/v1/responses');
  await sigtermNotReady(t, s);
  responsesRow.faultsInjected++;

  const text = await stream.rest;
  t.regex(text, /event: response\.completed/);
  const exit = await s.child.exited;
  t.is(exit.code, 0);
  const completed = /"id":"(resp_[A-Za-z0-9]+)"/.exec(text)?.[1];
  t.truthy(completed);
  const stored = await s.knex('responses').where({ id: completed }).first();
  t.is(stored?.status, 'completed');
  responsesRow.requestsChecked += 2;
  responsesRow.faultsSurvived++;
});

/** A service's own entry point in a child process, on a fresh schema and bus prefix of its own. */
async function spawnService(t: ExecutionContext, entry: string, portVariable: string, env: Record<string, string>) {
  const config = testConfig();
  const port = await freePort();
  const child = startEntryPoint(entry, stackEnv(config, { GATEWAY_SHARED_SECRET: config.GATEWAY_SHARED_SECRET, [portVariable]: String(port), SHUTDOWN_TIMEOUT_MS: '30000', ...env }));
  const knex = knexFactory({ client: 'pg', connection: config.DATABASE_URL, searchPath: [config.DATABASE_SCHEMA!], pool: { min: 0, max: 2 } });
  t.teardown(async () => {
    child.process.kill('SIGKILL');
    await child.exited;
    await dropOwnStack(config, knex);
  });
  const url = `http://127.0.0.1:${port}`;
  await untilListening(child, url, entry);
  const user = await createTestUser(knex);
  return { child, url, port, knex, headers: { ...edgeHeaders(config.GATEWAY_SHARED_SECRET!, user), 'content-type': 'application/json' } };
}

/** A page that answers only once `release()` is called; `requested` resolves when it is asked for. */
async function heldSite(t: ExecutionContext, type: string, body: string | Buffer) {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let fetched!: () => void;
  const requested = new Promise<void>((resolve) => (fetched = resolve));
  const site = http.createServer((_req, res) => {
    fetched();
    void released.then(() => res.writeHead(200, { 'content-type': type }).end(body));
  });
  await new Promise<void>((resolve) => site.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    site.closeAllConnections();
    site.close();
  });
  return { url: `http://127.0.0.1:${(site.address() as net.AddressInfo).port}/page`, requested, release };
}

/** SIGTERM while `pending` is in flight: readyz 503 at once, then the held dependency answers. */
async function drainDuring(t: ExecutionContext, service: { child: Child; port: number }, release: () => void) {
  await sigtermNotReady(t, service);
  release();
}

test('mcp-tools: SIGTERM during a tool call, /readyz 503 from the start of the drain, the call returns its result, exit 0', async (t) => {
  const toolsRow = figures.row('SIGTERM during a tool call (mcp-tools process)');
  // The page the scrape tool fetches answers only when the test says so: the call is in flight at the signal.
  const site = await heldSite(t, 'text/html', ARTICLE_HTML);
  const service = await spawnService(t, 'services/mcp-tools/main.ts', 'MCP_TOOLS_PORT', { EGRESS_ALLOW_HOSTS: '127.0.0.1' });
  const call = fetch(`${service.url}/v1/mcp`, {
    method: 'POST',
    headers: { ...service.headers, accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'scrape', arguments: { url: site.url } } }),
  }).then(async (res) => ({ status: res.status, text: await res.text() }));
  await site.requested;
  toolsRow.faultsInjected++;
  await drainDuring(t, service, site.release);

  const answer = await call;
  t.is(answer.status, 200);
  t.regex(answer.text, /Otters of the Pacific/);
  t.notRegex(answer.text, /"isError":true/);
  t.is((await service.child.exited).code, 0);
  toolsRow.requestsChecked += 2;
  toolsRow.faultsSurvived++;
});

test('media-api: SIGTERM during an upload from a URL, /readyz 503 from the start of the drain, the upload is stored, exit 0', async (t) => {
  const mediaRow = figures.row('SIGTERM during an upload (media-api process)');
  const png = await solidImage('png', 8, 8, 5);
  const site = await heldSite(t, 'image/png', png);
  const dataDir = await mkdtemp(join(tmpdir(), 'media-drain-'));
  t.teardown(() => rm(dataDir, { recursive: true, force: true }));
  const service = await spawnService(t, 'services/media-api/main.ts', 'MEDIA_API_PORT', { EGRESS_ALLOW_HOSTS: '127.0.0.1', DATA_DIR: dataDir, MASTER_KEY: randomBytes(32).toString('hex') });
  const upload = fetch(`${service.url}/v1/media/upload`, { method: 'POST', headers: service.headers, body: JSON.stringify({ source: { type: 'url', url: site.url } }) }).then(
    async (res) => ({ status: res.status, body: (await res.json()) as any }),
  );
  await site.requested;
  mediaRow.faultsInjected++;
  await drainDuring(t, service, site.release);

  const answer = await upload;
  t.is(answer.status, 201, JSON.stringify(answer.body));
  t.is((await service.child.exited).code, 0);
  t.truthy(await service.knex('media').where({ id: answer.body.id }).first(), 'the upload was stored before the exit');
  mediaRow.requestsChecked += 2;
  mediaRow.faultsSurvived++;
});
