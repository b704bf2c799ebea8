import test from 'ava';
import { MODEL, startResponsesPlatform, type ResponsesPlatform } from './harness.js';

// A foreground JSON response writes nothing until it ends, so a loop longer than the edge's read
// timeout gets the edge's 504. The loop must notice that its caller is gone (in process, the edge
// answers on the service's own response object; over HTTP it closes the connection) and stop at
// its next step boundary: stored `cancelled`, never `completed` under an id nobody received.
// Runs under both edge transports (TEST_EDGE_TRANSPORT=http for the HTTP hop).
let p: ResponsesPlatform;

test.before(async () => {
  p = await startResponsesPlatform({ EDGE_UPSTREAM_READ_TIMEOUT_MS: '4000' });
});
test.after.always(async () => {
  await p?.stop();
});

test('the edge gives up on a long JSON response (504): the loop stops at its next step and the response is stored cancelled', async (t) => {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  p.fake.script('edge-gives-up', [
    { tool_calls: [{ name: 'no_such_tool', arguments: {} }] },
    // Answers once the client has its 504: the step in flight when the edge gave up.
    { gate, tool_calls: [{ name: 'no_such_tool', arguments: {} }] },
    { content: 'a step nobody should ask for' },
  ]);
  const { key, userId } = await p.newClient();
  const knex = p.runtime.db.knex;
  // A foreground JSON response is written once, when it ends.
  const stored = new Promise<void>((resolve) => {
    const onResponse = (_rows: unknown, query: { method?: string; sql: string; bindings?: unknown[] }) => {
      if (query.method === 'insert' && query.sql.includes('"responses"') && query.bindings?.includes(userId)) {
        knex.off('query-response', onResponse);
        resolve();
      }
    };
    knex.on('query-response', onResponse);
  });

  const res = await fetch(`${p.url}/v1/responses`, {
    method: 'POST',
    headers: { 'x-api-key': key, 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, input: 'long #script:edge-gives-up' }),
  });
  t.is(res.status, 504);
  t.is(((await res.json()) as any).error.code, 'upstream_timeout');
  release();
  await stored;

  const rows = await knex('responses').where({ user_id: userId });
  t.is(rows.length, 1);
  t.is(rows[0].status, 'cancelled');
  t.true(p.fake.scriptRequests('edge-gives-up').length <= 2, 'no step was asked after the edge gave up, but the one in flight');
});
