import http from 'node:http';
import type { AddressInfo } from 'node:net';
import test from 'ava';
import { startMcpPlatform, type McpPlatform } from '../../mcp/helpers.js';
import { waitFor } from '../../helpers/wait.js';

// A chat completion whose provider sends nothing for longer than the edge's read timeout gets the
// edge's 504. With in-process dispatch (the default) the edge writes that 504 on the service's own
// response object, and that answer completes normally: llm-api must still take it as its client
// gone. The provider request is cut at once (not at LLM_COMPLETION_MAX_DURATION_MS), the usage row
// says the client left (499 client_closed, nothing charged), and the budget reservation is given
// back. Runs under both edge transports (./edge-timeout.http.test.ts: the edge closes its HTTP hop).
const MODEL = 'stall-model';
const PER_REQUEST = 1000; // µUSD: a request recorded as answered would be charged this
let p: McpPlatform;
let provider: StallingProvider;

interface StallingProvider {
  url: string;
  /** Markers of the chat requests that arrived (the last user message's `#stall:<marker>`). */
  arrived: Set<string>;
  /** Markers of the chat requests whose connection the caller closed. */
  cut: Set<string>;
  close(): Promise<void>;
}

/** A provider that lists `MODEL`, takes every chat request and never answers it: it only notes the request and its connection's close. */
async function startStallingProvider(): Promise<StallingProvider> {
  const arrived = new Set<string>();
  const cut = new Set<string>();
  const server = http.createServer((req, res) => {
    if (req.method === 'GET' && req.url === '/v1/models') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ object: 'list', data: [{ id: MODEL, object: 'model', created: 1700000000, owned_by: 'stall' }] }));
      return;
    }
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (text: string) => (raw += text));
    req.on('end', () => {
      const marker = /#stall:([\w-]+)/.exec(raw)?.[1] ?? 'unmarked';
      arrived.add(marker);
      res.on('close', () => cut.add(marker));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`,
    arrived,
    cut,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

test.before(async () => {
  provider = await startStallingProvider();
  p = await startMcpPlatform({
    // Every call through the edge here (the admin setup, the API keys, the chat request up to the
    // provider) must answer within it: 2 s leaves a loaded CI machine room, at 2 s of wall time per test.
    EDGE_UPSTREAM_READ_TIMEOUT_MS: '2000',
    // Far beyond the test: a provider request still open is one nobody cut.
    LLM_COMPLETION_MAX_DURATION_MS: '600000',
    LLM_HEALTH_PROBE_INTERVAL_MS: '0',
    LLM_USAGE_FLUSH_MS: '50',
  });
  const created = await p.api(p.adminKey, 'POST', '/v1/admin/providers', { name: 'Stalling', vendor: 'fake', base_url: provider.url });
  if (created.status !== 201) throw new Error(`provider: ${created.status} ${JSON.stringify(created.json)}`);
  const pms = await p.api(p.adminKey, 'GET', `/v1/admin/models/provider-models?provider_id=${created.json.id}`);
  for (const pm of pms.json.data) {
    const priced = await p.api(p.adminKey, 'PATCH', `/v1/admin/models/provider-models/${pm.id}`, { pricing: { lines: [{ unit: 'per_request', amount_micro_usd: PER_REQUEST }] } });
    if (priced.status !== 200) throw new Error(`pricing: ${priced.status} ${JSON.stringify(priced.json)}`);
  }
});
test.after.always(async () => {
  await p?.stop();
  await provider?.close();
});

/** A user of its own with a daily budget (so the request holds a reservation), and their API key. */
async function budgetedUser() {
  const { user, key } = await p.newUser();
  const set = await p.api(p.adminKey, 'PATCH', `/v1/admin/users/${user.id}`, { max_budget_micro_usd: 50_000_000 });
  if (set.status !== 200) throw new Error(`budget: ${set.status} ${JSON.stringify(set.json)}`);
  return { userId: user.id, key };
}

for (const stream of [true, false]) {
  const kind = stream ? 'a stream' : 'a JSON completion';
  test(`${kind} the edge gives up on (504): the provider request is cut, the usage row says the client left, the budget is given back`, async (t) => {
    const marker = `m-${stream ? 'stream' : 'json'}-${Date.now().toString(36)}`;
    const { userId, key } = await budgetedUser();
    const res = await fetch(`${p.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'x-api-key': key, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, stream, messages: [{ role: 'user', content: `hello #stall:${marker}` }] }),
    });
    t.is(res.status, 504);
    const body = (await res.json()) as { error: { code: string; request_id: string } };
    t.is(body.error.code, 'upstream_timeout');
    t.true(provider.arrived.has(marker), 'the 504 came while the provider held the request');

    // The provider sees its connection closed (the fake notes the close event).
    await waitFor(() => provider.cut.has(marker), 10_000, 'the provider request cut');

    const knex = p.runtime.db.knex;
    const row = await waitFor(() => knex('llm_usage').where({ request_id: body.error.request_id }).first(), 10_000, 'the usage row');
    t.like(row, { user_id: userId, model: MODEL, stream, status: 499, outcome: 'client_closed' });
    t.is(Number(row.cost_micro_usd), 0, 'nothing is charged for an answer the client never got');

    const counter = await waitFor(
      async () => {
        const c = await knex('llm_spend_counters').where({ scope: 'user', scope_id: userId }).first();
        return c && c.in_flight === 0 && c;
      },
      10_000,
      'the budget reservation given back',
    );
    t.is(Number(counter.spent_micro_usd), 0);
  });
}
