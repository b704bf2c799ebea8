import test from 'ava';
import { createDatabase, kitMigrations, migrateAll } from '../../services/kit/index.js';
import { responsesMigrations } from '../../services/response-api/responses/migrations.js';
import { waitFor } from '../helpers/wait.js';
import { MODEL, startResponsesPlatform, type ResponsesPlatform } from '../responses/harness.js';

// An mcp tool's `authorization` and `headers` were once taken and kept with the response's `tools`
// and in the kept events of a background response. A migration removes them: a retrieve and a
// stream replay no longer serve them. On PostgreSQL through the API, and on the embedded database
// (PGlite) from rows in the old shape, across several pages of rows.
const NAME = '20261207_2350_responses_mcp_credentials_removed';
const migration = () => {
  const found = responsesMigrations.find((m) => m.name === NAME);
  if (!found) throw new Error(`no migration ${NAME}`);
  return found;
};

let p: ResponsesPlatform;
test.before(async () => {
  p = await startResponsesPlatform({ RESPONSES_PURGE_INTERVAL_MS: '0' });
});
test.after.always(async () => {
  await p?.stop();
});

test('the credentials of a stored mcp tool are no longer served by a retrieve or a stream replay after the migration', async (t) => {
  const { key } = await p.newUser();
  p.fake.script('old-shape', [{ content: 'ok' }]);
  const create = await fetch(`${p.url}/v1/responses`, {
    method: 'POST',
    headers: { 'x-api-key': key, 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, input: 'x #script:old-shape', background: true, tools: [{ type: 'mcp', server_label: 'jan', allowed_tools: ['python_exec'] }, { type: 'function', name: 'f' }] }),
  });
  t.is(create.status, 200);
  const { id } = (await create.json()) as any;
  const knex = p.runtime.db.knex;
  await waitFor(async () => (await knex('response_events').where({ response_id: id, type: 'response.completed' }).first()) !== undefined);

  // The shape a response had when both were taken: in its row and in every kept event that carries it.
  const credentials = { authorization: 'secret-oauth-token', headers: { Authorization: 'Bearer secret-header' } };
  const row = await knex('responses').where({ id }).first();
  row.body.tools[0] = { ...row.body.tools[0], ...credentials };
  await knex('responses').where({ id }).update({ body: JSON.stringify(row.body) });
  let carrying = 0;
  for (const event of await knex('response_events').where({ response_id: id }).select('sequence_number', 'data')) {
    const data = JSON.parse(event.data);
    if (!data.response) continue;
    data.response.tools[0] = { ...data.response.tools[0], ...credentials };
    await knex('response_events').where({ response_id: id, sequence_number: event.sequence_number }).update({ data: JSON.stringify(data) });
    carrying++;
  }
  t.true(carrying >= 2, 'the created and completed events carry the response');
  const get = async (query = '') => (await fetch(`${p.url}/v1/responses/${id}${query}`, { headers: { 'x-api-key': key } })).text();
  t.true((await get()).includes('secret-oauth-token'), 'the old shape is served before the migration');
  t.true((await get('?stream=true')).includes('secret-header'));

  await migration().up(knex);

  const retrieved = await get();
  t.false(retrieved.includes('secret'));
  t.deepEqual(JSON.parse(retrieved).tools, [
    { type: 'mcp', server_label: 'jan', allowed_tools: ['python_exec'] },
    { type: 'function', name: 'f', parameters: null, strict: null },
  ]);
  const replay = await get('?stream=true');
  t.false(replay.includes('secret'));
  const events = replay
    .split('\n')
    .filter((line) => line.startsWith('data: {'))
    .map((line) => JSON.parse(line.slice(6)));
  t.is(events.filter((e) => e.response).length, carrying);
  for (const e of events.filter((e) => e.response)) t.deepEqual(e.response.tools[0], { type: 'mcp', server_label: 'jan', allowed_tools: ['python_exec'] });
});

test('on the embedded database: every mcp tool of every stored response and kept event loses the two keys, across pages; nothing else changes', async (t) => {
  const db = await createDatabase({ dataDir: '.', inMemory: true });
  t.teardown(() => db.close());
  const set = (migrations: typeof responsesMigrations) => ({ owner: 'response_api', migrations });
  await migrateAll(db.knex, [kitMigrations, set(responsesMigrations.filter((m) => m.name < NAME))]);

  const mcp = { type: 'mcp', server_label: 'jan', allowed_tools: ['python_exec'] };
  const oldMcp = { ...mcp, authorization: 'secret', headers: { 'X-Key': 'secret' } };
  // A function tool's own key of the same name is the client's, not an mcp credential: kept.
  const fn = { type: 'function', name: 'f', parameters: null, strict: null, headers: 'kept' };
  const bodyOf = (i: number) => (i % 97 === 0 ? { id: `r${i}`, tools: [oldMcp, fn, { ...mcp, headers: null }] } : i % 13 === 0 ? { id: `r${i}` } : { id: `r${i}`, tools: [mcp, fn] });
  const now = new Date();
  const ROWS = 1203;
  const rows = Array.from({ length: ROWS }, (_, i) => ({
    id: `resp_${String(i).padStart(5, '0')}`,
    user_id: 'u1',
    status: 'completed',
    body: JSON.stringify(bodyOf(i)),
    context: '[]',
    input_items: '[]',
    created_at: now,
    expires_at: now,
  }));
  for (let i = 0; i < rows.length; i += 300) await db.knex('responses').insert(rows.slice(i, i + 300));
  const delta = JSON.stringify({ type: 'response.output_text.delta', sequence_number: 1, delta: '{"type":"mcp","authorization":"said, not stored"}' });
  const eventOf = (n: number) =>
    n % 2 === 0 ? JSON.stringify({ type: 'response.in_progress', sequence_number: n, response: { id: 'x', tools: [oldMcp, fn] } }) : JSON.stringify({ ...JSON.parse(delta), sequence_number: n });
  const events = [0, 1, 2].flatMap((r) => Array.from({ length: 400 }, (_, n) => ({ response_id: rows[r]!.id, sequence_number: n, type: 'x', data: eventOf(n), created_at: now })));
  for (let i = 0; i < events.length; i += 300) await db.knex('response_events').insert(events.slice(i, i + 300));

  await migrateAll(db.knex, [kitMigrations, set(responsesMigrations)]);

  const stored = await db.knex('responses').orderBy('id').select('id', 'body');
  t.is(stored.length, ROWS);
  stored.forEach((row, i) => {
    const expected = i % 97 === 0 ? { id: `r${i}`, tools: [mcp, fn, mcp] } : bodyOf(i);
    t.deepEqual(row.body, expected, row.id);
  });
  const kept = await db.knex('response_events').orderBy(['response_id', 'sequence_number']).select('sequence_number', 'data');
  t.is(kept.length, events.length);
  for (const event of kept) {
    if (event.sequence_number % 2 === 0) t.deepEqual(JSON.parse(event.data).response.tools, [mcp, fn]);
    else t.is(event.data, JSON.stringify({ ...JSON.parse(delta), sequence_number: event.sequence_number }), 'an event without a response is left as it was');
  }
});
